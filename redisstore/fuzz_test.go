package redisstore

import (
	"errors"
	"slices"
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
		if (redlimit.Key{Name: a}).ValidateName() != nil || (redlimit.Key{Name: b}).ValidateName() != nil {
			return // refused before any key is made
		}
		ka := limiterKeys(DefaultPrefix, a)
		tag := hashTag(ka.limiter)
		sk := scriptKeys(DefaultPrefix, a, client)
		if want := []string{ka.limiter, ka.log, ka.base + "client:" + client, ka.base + "log:" + client}; !slices.Equal(sk, want) {
			t.Fatalf("name %q client %q: script keys %q, want %q", a, client, sk, want)
		}
		for _, k := range sk {
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

// FuzzDecodeReply: any reply (any bytes, or not a string at all) decodes to
// replies or a typed error; never a panic, never a config that is not one.
func FuzzDecodeReply(f *testing.F) {
	f.Add(msgpack(int64(1700000000000), int64(1), "sliding-log overall 10 1000 1 0 0", int64(1), int64(9), int64(0)), byte(0))
	f.Add(msgpack(int64(1700000000000), int64(0), int64(1), int64(9), int64(0), int64(5), int64(-1)), byte(1))
	f.Add(msgpack(int64(1700000000000), int64(-1), int64(1700000000000), int64(0), int64(0), int64(0), int64(0), int64(1), int64(1), int64(0), int64(1), int64(2), int64(1)), byte(3))
	f.Add(msgpack(int64(1), int64(1), "x"), byte(1))
	f.Add("", byte(7))
	f.Fuzz(func(t *testing.T, text string, shape byte) {
		var raw any = text
		if shape == 7 {
			raw = []any{int64(1)} // not even a string
		}
		// One or two limiters, whose clients may or may not have known a config.
		var known redlimit.Config
		if shape%2 == 1 {
			known = redlimit.PerSecond(10)
			known, _ = known.Normalize()
		}
		works := []*work{{key: redlimit.Key{Name: "a", Client: "c"}, known: encode(known), calls: make([]call, 1)}}
		if shape%3 == 0 {
			works = append(works, &work{key: redlimit.Key{Name: "b", Client: "c"}, known: encode(redlimit.Config{}), calls: make([]call, 2)})
		}
		if err := decodeReplies(raw, works); err != nil {
			if !errors.Is(err, redlimit.ErrCorrupt) {
				t.Fatalf("decodeReplies(%q) = %v: untyped", text, err)
			}
			return
		}
		for i, w := range works {
			if w.err != nil {
				if !errors.Is(w.err, redlimit.ErrCorrupt) && !errors.Is(w.err, redlimit.ErrNotInitialized) {
					t.Fatalf("decodeReplies(%q) work %d = %v: untyped", text, i, w.err)
				}
				continue
			}
			if len(w.rs) != len(w.calls) {
				t.Fatalf("decodeReplies(%q) work %d: %d replies for %d calls", text, i, len(w.rs), len(w.calls))
			}
			for _, o := range w.rs {
				if o.cfg.Rate < 1 {
					t.Fatalf("decodeReplies(%q) accepted config %+v", text, o.cfg)
				}
			}
		}
	})
}

// FuzzPolicyStateKeys: every key of one policy's key has the same hash
// tag, whatever bytes the policy's name and the key hold, two pairs never
// share one, and none is a limiter's or a policy config's key.
func FuzzPolicyStateKeys(f *testing.F) {
	f.Add("api", "user:1", "api:user", "1")
	f.Add("{", "}", "{}", "")
	f.Add("a%3Ab", "c", "a", "b:c")
	f.Fuzz(func(t *testing.T, p1, k1, p2, k2 string) {
		a, b := redlimit.PolicyKey{Policy: p1, Key: k1}, redlimit.PolicyKey{Policy: p2, Key: k2}
		if a.Validate() != nil || b.Validate() != nil {
			return // refused before any key is made
		}
		ka := policyStateKeys(DefaultPrefix, a, 3)
		tag := hashTag(ka[0])
		for _, k := range ka {
			if hashTag(k) != tag {
				t.Fatalf("%+v: key %q has tag %q, its state %q", a, k, hashTag(k), tag)
			}
			if k == policyConfigKey(DefaultPrefix, p1) || k == policyConfigKey(DefaultPrefix, p2) || slices.Contains(scriptKeys(DefaultPrefix, p1, k1), k) {
				t.Fatalf("%+v: key %q is a config's or a limiter's", a, k)
			}
		}
		if a != b && hashTag(policyStateKeys(DefaultPrefix, b, 1)[0]) == tag {
			t.Fatalf("%+v and %+v share the tag %q", a, b, tag)
		}
	})
}
