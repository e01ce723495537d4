package redisstore

import (
	"errors"
	"strings"
	"testing"

	"github.com/redlimit/redlimit"
)

// hashTag is the part of key Redis Cluster hashes: the text between the
// first '{' and the first '}' after it, when not empty.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// FuzzKeys: every key of a limiter has the same hash tag, whatever its name
// and client ID, and two names never share a tag.
func FuzzKeys(f *testing.F) {
	f.Add("api", "{api}", "c1")
	f.Add("{", "}", "{x}")
	f.Add("%7B", "{", "")
	f.Fuzz(func(t *testing.T, a, b, client string) {
		if redlimit.ValidateName(a) != nil || redlimit.ValidateName(b) != nil {
			return // refused before any key is made
		}
		ka := limiterKeys(DefaultPrefix, a)
		tag := hashTag(ka.limiter)
		for _, k := range ka.scriptKeys(client) {
			if hashTag(k) != tag {
				t.Fatalf("name %q client %q: key %q has tag %q, the limiter hash has %q", a, client, k, hashTag(k), tag)
			}
		}
		if a != b && hashTag(limiterKeys(DefaultPrefix, b).limiter) == tag {
			t.Fatalf("names %q and %q share the tag %q", a, b, tag)
		}
	})
}

// FuzzDecodeConfig: whatever a limiter hash holds as its config, decoding
// gives a valid config or ErrCorrupt; never a panic.
func FuzzDecodeConfig(f *testing.F) {
	f.Add("sliding-log overall 10 1000 5 0 0")
	f.Add("token-bucket per-client 1 1 1  x")
	f.Add("leaky-bucket overall 3 1000 7 0 5")
	f.Add("leaky-bucket overAll 1 1 0 00 0")
	f.Fuzz(func(t *testing.T, text string) {
		cfg, err := decodeConfig(text)
		if err != nil {
			if !errors.Is(err, redlimit.ErrCorrupt) {
				t.Fatalf("decodeConfig(%q) = %v: not ErrCorrupt", text, err)
			}
			return
		}
		if _, err := cfg.Normalize(); err != nil {
			t.Fatalf("decodeConfig(%q) accepted %+v: %v", text, cfg, err)
		}
		if configArg(cfg) != text {
			t.Fatalf("decodeConfig(%q) = %+v, which reads back as %q", text, cfg, configArg(cfg))
		}
	})
}

// FuzzDecodeReply: any reply (array of integers, strings and nils, of any
// length) decodes to replies or a typed error; never a panic.
func FuzzDecodeReply(f *testing.F) {
	f.Add([]byte{4, 4, 1, 5, 9, 13, 17, 21, 25, 8, 12, 16, 20}, "sliding-log", "overall", "10")
	f.Add([]byte{4, 128, 8, 12, 16, 20}, "", "", "")
	f.Add([]byte{4, 129, 8, 12, 16, 20}, "", "", "")
	f.Add([]byte{0xff}, "", "", "")
	f.Fuzz(func(t *testing.T, shape []byte, a, m, r string) {
		var v []any
		for i, b := range shape {
			switch b % 4 {
			case 0:
				v = append(v, int64(b)-128)
			case 1:
				v = append(v, []string{a, m, r, "1000", "5"}[i%5])
			case 2:
				v = append(v, nil)
			default:
				v = append(v, []any{int64(b)})
			}
		}
		var raw any = v
		if len(shape) > 0 && shape[0] == 7 {
			raw = string(shape) // not even an array
		}
		// One or two limiters, whose clients may or may not have known a config.
		var known redlimit.Config
		if len(shape) > 1 && shape[1]%2 == 1 {
			known = redlimit.PerSecond(10)
			known, _ = known.Normalize()
		}
		works := []*work{{key: redlimit.Key{Name: "a", Client: "c"}, known: known, calls: make([]call, 1)}}
		if len(shape) > 2 && shape[2]%3 == 0 {
			works = append(works, &work{key: redlimit.Key{Name: "b", Client: "c"}, calls: make([]call, 2)})
		}
		out := make([]result, len(works))
		err := decodeReplies(raw, works, out)
		if err != nil {
			if !errors.Is(err, redlimit.ErrCorrupt) {
				t.Fatalf("decodeReplies(%v) = %v: untyped", raw, err)
			}
			return
		}
		for i, r := range out {
			if r.err != nil {
				if !errors.Is(r.err, redlimit.ErrCorrupt) && !errors.Is(r.err, redlimit.ErrNotInitialized) {
					t.Fatalf("decodeReplies(%v) work %d = %v: untyped", raw, i, r.err)
				}
				continue
			}
			if len(r.rs) != len(works[i].calls) {
				t.Fatalf("decodeReplies(%v) work %d: %d replies for %d calls", raw, i, len(r.rs), len(works[i].calls))
			}
			for _, o := range r.rs {
				if o.cfg.Rate < 1 {
					t.Fatalf("decodeReplies(%v) accepted config %+v", raw, o.cfg)
				}
			}
		}
	})
}
