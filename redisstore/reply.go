package redisstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/redlimit/redlimit"
)

// limiter.lua answers a run with one string, a MessagePack array of
// integers and config strings (see its "out"): read in place, without the
// allocation per element a Redis array reply costs the client.

// packReader reads the MessagePack limiter.lua writes: an array of integers
// and strings, nothing else.
type packReader struct {
	b    string
	pos  int
	left int // elements of the array not read yet
}

func (r *packReader) corrupt(what string) error {
	return fmt.Errorf("%w: script reply: %s at byte %d of %d", redlimit.ErrCorrupt, what, r.pos, len(r.b))
}

// take returns the next n bytes.
func (r *packReader) take(n int) (string, bool) {
	if n < 0 || n > len(r.b)-r.pos {
		return "", false
	}
	s := r.b[r.pos : r.pos+n]
	r.pos += n
	return s, true
}

// header reads the array's header.
func (r *packReader) header() error {
	t, ok := r.take(1)
	if !ok {
		return r.corrupt("no array")
	}
	var n uint64
	switch c := t[0]; {
	case c >= 0x90 && c <= 0x9f:
		n = uint64(c & 0x0f)
	case c == 0xdc || c == 0xdd:
		if n, ok = r.uint(2 << (c - 0xdc)); !ok {
			return r.corrupt("array header cut short")
		}
	default:
		return r.corrupt(fmt.Sprintf("type 0x%02x, not an array", c))
	}
	if n > uint64(len(r.b)) {
		return r.corrupt("array longer than the reply")
	}
	r.left = int(n)
	return nil
}

// uint reads a big-endian unsigned integer of size bytes.
func (r *packReader) uint(size int) (uint64, bool) {
	s, ok := r.take(size)
	if !ok {
		return 0, false
	}
	var buf [8]byte
	copy(buf[8-size:], s)
	return binary.BigEndian.Uint64(buf[:]), true
}

// int reads the next element, which must be an integer.
func (r *packReader) int() (int64, error) {
	if r.left == 0 {
		return 0, r.corrupt("too few elements")
	}
	r.left--
	t, ok := r.take(1)
	if !ok {
		return 0, r.corrupt("cut short")
	}
	switch c := t[0]; {
	case c <= 0x7f:
		return int64(c), nil
	case c >= 0xe0:
		return int64(int8(c)), nil
	case c >= 0xcc && c <= 0xcf: // uint 8, 16, 32, 64
		v, ok := r.uint(1 << (c - 0xcc))
		if !ok || v > math.MaxInt64 {
			return 0, r.corrupt("bad unsigned integer")
		}
		return int64(v), nil
	case c >= 0xd0 && c <= 0xd3: // int 8, 16, 32, 64
		size := 1 << (c - 0xd0)
		v, ok := r.uint(size)
		if !ok {
			return 0, r.corrupt("integer cut short")
		}
		shift := 64 - 8*size
		return int64(v<<shift) >> shift, nil
	default:
		return 0, r.corrupt(fmt.Sprintf("type 0x%02x, not an integer", c))
	}
}

// str reads the next element, which must be a string.
func (r *packReader) str() (string, error) {
	if r.left == 0 {
		return "", r.corrupt("too few elements")
	}
	r.left--
	t, ok := r.take(1)
	if !ok {
		return "", r.corrupt("cut short")
	}
	var n uint64
	switch c := t[0]; {
	case c >= 0xa0 && c <= 0xbf:
		n = uint64(c & 0x1f)
	case c >= 0xd9 && c <= 0xdb: // str 8, 16, 32
		if n, ok = r.uint(1 << (c - 0xd9)); !ok {
			return "", r.corrupt("string header cut short")
		}
	default:
		return "", r.corrupt(fmt.Sprintf("type 0x%02x, not a string", c))
	}
	s, ok := r.take(int(min(n, math.MaxInt32)))
	if !ok {
		return "", r.corrupt("string cut short")
	}
	return s, nil
}

// errPerClientStored is the work error of a lone call (runLone) on a
// limiter stored as PerClient: nothing was done, main serves the call.
var errPerClientStored = errors.New("redisstore: the stored config is PerClient")

// decodeReplies reads limiter.lua's reply to works into their replies,
// trusting nothing of its shape: an error for the whole reply is returned,
// one for a limiter (not initialized, unreadable config) goes to its work.
// The reply carries a stored config only when it is not the one the client
// sent.
func decodeReplies(raw any, works []*work) error {
	text, ok := raw.(string)
	if !ok {
		return fmt.Errorf("%w: unexpected script reply %T", redlimit.ErrCorrupt, raw)
	}
	r := &packReader{b: text}
	if err := r.header(); err != nil {
		return err
	}
	for _, w := range works {
		now, err := r.int()
		if err != nil {
			return err
		}
		flag, err := r.int()
		if err != nil {
			return err
		}
		stored := &w.known.cfg
		switch flag {
		case -1:
			w.err = redlimit.ErrNotInitialized
			continue
		case -3:
			w.err = fmt.Errorf("limiter %q: %w: stored config", w.key.Name, redlimit.ErrCorrupt)
			continue
		case -4:
			w.err = errPerClientStored
			continue
		case 0:
			if stored.Rate == 0 {
				return fmt.Errorf("%w: script reply: the same config as none", redlimit.ErrCorrupt)
			}
		case 1:
			text, err := r.str()
			if err != nil {
				return err
			}
			// A copy: the config outlives the reply, which it would keep.
			cfg, err := decodeConfig(strings.Clone(text))
			if err != nil {
				return fmt.Errorf("limiter %q: %w", w.key.Name, err)
			}
			stored = &cfg
		default:
			return fmt.Errorf("%w: script reply config flag %d", redlimit.ErrCorrupt, flag)
		}
		if len(w.rs) != len(w.calls) {
			w.rs = make([]reply, len(w.calls))
		}
		for ci := range w.rs {
			o := &w.rs[ci]
			o.now, o.cfg = now, stored
			for _, p := range [3]*int64{&o.code, &o.value, &o.wait} {
				if *p, err = r.int(); err != nil {
					return err
				}
			}
			if o.code < -2 || o.code > 2 {
				return fmt.Errorf("%w: script reply code %d", redlimit.ErrCorrupt, o.code)
			}
		}
	}
	if r.left != 0 || r.pos != len(r.b) {
		return fmt.Errorf("%w: script reply longer than %d limiters' answers", redlimit.ErrCorrupt, len(works))
	}
	return nil
}

// policy.lua answers a keyed call with one MessagePack array of integers
// too, and a batch with an array of those: the client splits a batch's
// string into its calls' arrays (substrings, nothing copied) and reads
// each call's numbers into an array of its own stack.

// maxKeyedNums bounds the numbers of a keyed reply: now, flag, granted,
// full, refused, wait, then three per limit.
const maxKeyedNums = 6 + 3*redlimit.MaxLimits

// num reads the next element, an integer; a float (which cmsgpack writes
// for a Lua number that is not whole) is truncated, as Redis does when it
// turns a Lua number into an integer reply.
func (r *packReader) num() (int64, error) {
	if r.left > 0 && r.pos < len(r.b) {
		if c := r.b[r.pos]; c == 0xca || c == 0xcb {
			r.left--
			r.pos++
			size := 4 << (c - 0xca)
			v, ok := r.uint(size)
			if !ok {
				return 0, r.corrupt("float cut short")
			}
			f := math.Float64frombits(v)
			if size == 4 {
				f = float64(math.Float32frombits(uint32(v)))
			}
			if math.IsNaN(f) || f >= math.MaxInt64 || f < math.MinInt64 {
				return 0, r.corrupt("float out of range")
			}
			return int64(f), nil
		}
	}
	return r.int()
}

// array reads the next element, which must be an array of numbers, and
// returns its text (header and all): one call's reply in a batch's.
func (r *packReader) array() (string, error) {
	if r.left == 0 {
		return "", r.corrupt("too few elements")
	}
	start, left := r.pos, r.left
	if err := r.header(); err != nil {
		return "", err
	}
	for r.left > 0 {
		if _, err := r.num(); err != nil {
			return "", err
		}
	}
	r.left = left - 1
	return r.b[start:r.pos], nil
}

// splitKeyed reads a batch's reply raw (policy_batch's) as the replies of
// size calls, setting each call's text through set, in order.
func splitKeyed(raw any, size int, set func(i int, text string)) error {
	text, ok := raw.(string)
	if !ok {
		return fmt.Errorf("%w: unexpected keyed batch reply %T", redlimit.ErrCorrupt, raw)
	}
	r := &packReader{b: text}
	if err := r.header(); err != nil {
		return err
	}
	if r.left != size {
		return fmt.Errorf("%w: a keyed batch of %d calls answered %d", redlimit.ErrCorrupt, size, r.left)
	}
	for i := range size {
		call, err := r.array()
		if err != nil {
			return err
		}
		set(i, call)
	}
	if r.pos != len(r.b) {
		return r.corrupt("bytes after the last call")
	}
	return nil
}

// keyedNums reads one keyed call's reply text into nums and returns the
// numbers read: at least two (now, flag).
func keyedNums(text string, nums *[maxKeyedNums]int64) ([]int64, error) {
	r := &packReader{b: text}
	if err := r.header(); err != nil {
		return nil, err
	}
	if r.left < 2 || r.left > len(nums) {
		return nil, fmt.Errorf("%w: keyed reply of %d numbers", redlimit.ErrCorrupt, r.left)
	}
	n := r.left
	for i := range n {
		v, err := r.num()
		if err != nil {
			return nil, err
		}
		nums[i] = v
	}
	if r.pos != len(r.b) {
		return nil, r.corrupt("bytes after the numbers")
	}
	return nums[:n], nil
}
