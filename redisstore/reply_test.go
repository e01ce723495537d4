package redisstore

import (
	"encoding/binary"
	"errors"
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
