package redisstore

import (
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/redlimit/redlimit"
)

// msgpack encodes integers and strings as an array the way Redis's cmsgpack
// does, with the widest forms: what decodeReplies must read.
func msgpack(vs ...any) string {
	b := []byte{0xdd, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(len(vs)))
	for _, v := range vs {
		switch v := v.(type) {
		case int64:
			b = append(b, 0xd3)
			b = binary.BigEndian.AppendUint64(b, uint64(v))
		case string:
			b = append(b, 0xdb)
			b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
			b = append(b, v...)
		}
	}
	return string(b)
}

// TestDecodeReplyForms: every form MessagePack may give an integer, a string
// or the array reads as the same value, and what is not an integer where
// one belongs is ErrCorrupt.
func TestDecodeReplyForms(t *testing.T) {
	known := encode(redlimit.PerSecond(10).WithAlgorithm(redlimit.FixedWindow))
	known.cfg, _ = known.cfg.Normalize()
	known = encode(known.cfg)
	now := []string{"\xcf\x00\x00\x01\x8b\xcf\xe5\x68\x00", "\xd3\x00\x00\x01\x8b\xcf\xe5\x68\x00"} // 1700000000000
	cfg := "token-bucket overall 5 1000 1 5 0"
	short := "sliding-log overall 5 100 1 0 0" // 31 bytes: a fixstr
	for _, tc := range []struct {
		name, reply string
		want        []reply // code, value, wait
		wantCfg     string
	}{
		{"fixints", "\x95" + now[0] + "\x00" + "\x01\x7f\xff", []reply{{code: 1, value: 127, wait: -1}}, ""},
		{"wide ints", "\x95" + now[1] + "\xd0\x00" + "\xd0\xfe\xcc\xff\xd1\xff\xfe", []reply{{code: -2, value: 255, wait: -2}}, ""},
		{"16 and 32 bits", "\xdc\x00\x05" + now[0] + "\xd2\x00\x00\x00\x00" + "\x00\xcd\x01\x2c\xce\x00\x01\x00\x00", []reply{{code: 0, value: 300, wait: 65536}}, ""},
		{"stored config", "\x96" + now[0] + "\x01" + string([]byte{byte(0xa0 + len(short))}) + short + "\x00\x00\x0a", []reply{{code: 0, value: 0, wait: 10}}, short},
		{"str8 config", "\x96" + now[0] + "\x01\xd9" + string([]byte{byte(len(cfg))}) + cfg + "\x00\x00\x0a", []reply{{code: 0, value: 0, wait: 10}}, cfg},
	} {
		w := &work{key: redlimit.Key{Name: "a"}, known: known, calls: make([]call, 1)}
		if err := decodeReplies(tc.reply, []*work{w}); err != nil || w.err != nil {
			t.Errorf("%s: %v %v", tc.name, err, w.err)
			continue
		}
		r := w.rs[0]
		if r.now != 1700000000000 || r.code != tc.want[0].code || r.value != tc.want[0].value || r.wait != tc.want[0].wait {
			t.Errorf("%s: %+v; want %+v at 1700000000000", tc.name, r, tc.want[0])
		}
		if got := configArg(*r.cfg); tc.wantCfg != "" && got != tc.wantCfg || tc.wantCfg == "" && r.cfg != &known.cfg {
			t.Errorf("%s: config %q; want %q", tc.name, got, tc.wantCfg)
		}
	}
	for name, bad := range map[string]string{
		"float":             "\x95" + now[0] + "\x00\x01\xcb\x3f\xf0\x00\x00\x00\x00\x00\x00\x00",
		"uint64 over int64": "\x95" + now[0] + "\x00\x01\xcf\xff\xff\xff\xff\xff\xff\xff\xff\x00",
		"nil":               "\x95" + now[0] + "\x00\x01\xc0\x00",
		"a map":             "\x85",
		"short array":       "\x94" + now[0] + "\x00\x01\x01",
		"long array":        "\x96" + now[0] + "\x00\x01\x01\x01\x01",
		"trailing bytes":    "\x95" + now[0] + "\x00\x01\x01\x01\x01",
		"cut string":        "\x96" + now[0] + "\x01\xa9token",
		"bad config":        msgpack(int64(1), int64(1), "token-bucket overall 0 1000 1 5 0", int64(1), int64(1), int64(1)),
	} {
		w := &work{key: redlimit.Key{Name: "a"}, known: known, calls: make([]call, 1)}
		if err := decodeReplies(bad, []*work{w}); !errors.Is(err, redlimit.ErrCorrupt) {
			t.Errorf("%s: %v; want ErrCorrupt", name, err)
		}
	}
}

// TestKeyedNumsForms: a keyed reply's numbers read the same in every form
// MessagePack gives an integer, a float (cmsgpack's form of a Lua number
// that is not whole) truncated toward zero as Redis's integer reply of it
// is, and anything else is ErrCorrupt.
func TestKeyedNumsForms(t *testing.T) {
	now := "\xcf\x00\x00\x01\x8b\xcf\xe5\x68\x00" // 1700000000000
	zeros := make([]any, maxKeyedNums+1)
	for i := range zeros {
		zeros[i] = int64(0)
	}
	for _, tc := range []struct {
		name, reply string
		want        []int64
	}{
		{"fixints", "\x94" + now + "\x01\x7f\xff", []int64{1700000000000, 1, 127, -1}},
		{"wide ints", "\xdc\x00\x04" + now + "\xd0\xfc\xcd\x01\x2c\xd3\xff\xff\xff\xff\xff\xff\xff\xfe", []int64{1700000000000, -4, 300, -2}},
		{"float64", "\x94" + now + "\x00\xcb\x3f\xfe\x66\x66\x66\x66\x66\x66\xcb\xbf\xfe\x66\x66\x66\x66\x66\x66", []int64{1700000000000, 0, 1, -1}}, // 1.9, -1.9
		{"float32", "\x93" + now + "\x00\xca\x40\x20\x00\x00", []int64{1700000000000, 0, 2}},                                                         // 2.5
		{"the most", msgpack(zeros[1:]...), make([]int64, maxKeyedNums)},
	} {
		var buf [maxKeyedNums]int64
		got, err := keyedNums(tc.reply, &buf)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v; want %v", tc.name, got, tc.want)
		}
	}
	for name, bad := range map[string]string{
		"one number":      "\x91" + now,
		"too many":        msgpack(zeros...),
		"a string":        "\x93" + now + "\x00\xa1x",
		"nil":             "\x93" + now + "\x00\xc0",
		"a map":           "\x82\x01\x01\x02\x02",
		"NaN":             "\x93" + now + "\x00\xcb\x7f\xf8\x00\x00\x00\x00\x00\x01",
		"float too large": "\x93" + now + "\x00\xcb\x43\xe0\x00\x00\x00\x00\x00\x00", // 2^63
		"cut float":       "\x93" + now + "\x00\xcb\x3f\xf0",
		"short array":     "\x93" + now + "\x00",
		"trailing bytes":  "\x92" + now + "\x00\x00",
		"empty":           "",
	} {
		var buf [maxKeyedNums]int64
		if got, err := keyedNums(bad, &buf); !errors.Is(err, redlimit.ErrCorrupt) {
			t.Errorf("%s: %v, %v; want ErrCorrupt", name, got, err)
		}
	}
}

// TestSplitKeyed: a batch's reply splits into its calls' arrays in order,
// each read as policy_main's reply; a batch answering another number of
// calls, or anything but arrays of numbers, is ErrCorrupt.
func TestSplitKeyed(t *testing.T) {
	calls := []string{"\x92\x01\x00", "\x92\xd0\xfd\x01", "\xdc\x00\x03\xcb\x40\x00\x00\x00\x00\x00\x00\x00\x01\xcd\x01\x2c", "\x90"}
	batch := "\x94" + strings.Join(calls, "")
	var got []string
	if err := splitKeyed(batch, len(calls), func(i int, text string) {
		if i != len(got) {
			t.Errorf("call %d set after %d", i, len(got))
		}
		got = append(got, text)
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, calls) {
		t.Fatalf("split %q; want %q", got, calls)
	}
	for name, bad := range map[string]struct {
		raw  any
		size int
	}{
		"fewer calls":    {batch, 5},
		"more calls":     {batch, 3},
		"not a string":   {[]any{int64(1)}, 1},
		"a number":       {"\x91\x01", 1},
		"a string in":    {"\x91\x92\x01\xa1x", 1},
		"cut call":       {"\x91\x93\x01\x00", 1},
		"trailing bytes": {"\x91\x90\x00", 1},
	} {
		if err := splitKeyed(bad.raw, bad.size, func(int, string) {}); !errors.Is(err, redlimit.ErrCorrupt) {
			t.Errorf("%s: %v; want ErrCorrupt", name, err)
		}
	}
}
