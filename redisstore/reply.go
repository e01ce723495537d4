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
