package refusalcache_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/refusalcache"
	"github.com/redlimit/redlimit/storetest"
)

// keyFixture is a cache in front of a memory store, on a fake clock, with
// one policy of two limits: 2 per second and 100 per hour.
type keyFixture struct {
	t     *testing.T
	clk   *clock.Fake
	mem   *memstore.Store
	cache *refusalcache.Store
	known redlimit.PolicyConfig
}

func newKeyFixture(t *testing.T, set refusalcache.Settings) *keyFixture {
	clk := clock.NewFake(storetest.T0)
	mem := memstore.New(memstore.WithTimeSource(clk))
	set.Clock = clk
	cache, err := refusalcache.New(mem, set)
	if err != nil {
		t.Fatal(err)
	}
	f := &keyFixture{t: t, clk: clk, mem: mem, cache: cache}
	f.known = f.setPolicy(redlimit.PerSecond(2), redlimit.PerInterval(100, time.Hour))
	return f
}

func (f *keyFixture) setPolicy(limits ...redlimit.Config) redlimit.PolicyConfig {
	f.t.Helper()
	stored, _, err := f.cache.SetPolicy(context.Background(), "api", redlimit.PolicyConfig{Limits: limits}, redlimit.SetKeepState)
	if err != nil {
		f.t.Fatal(err)
	}
	return stored
}

func (f *keyFixture) acquire(key string, n int64) (redlimit.PolicyDecision, bool) {
	f.t.Helper()
	before := f.cache.Stats().LocalKeyRefusals
	d, err := f.cache.AcquireKey(context.Background(), redlimit.PolicyKey{Policy: "api", Key: key}, f.known, n, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	return d, f.cache.Stats().LocalKeyRefusals > before
}

// exhaust takes key's two permits of the second and returns the refusal
// that follows, made by the store.
func (f *keyFixture) exhaust(key string) redlimit.PolicyDecision {
	f.t.Helper()
	for range 2 {
		if d, _ := f.acquire(key, 1); !d.Granted {
			f.t.Fatalf("not granted: %+v", d)
		}
	}
	d, local := f.acquire(key, 1)
	if d.Granted || local {
		f.t.Fatalf("want a refusal from the store, got %+v (local %v)", d, local)
	}
	return d
}

func TestKeyedRefusalAnsweredLocally(t *testing.T) {
	f := newKeyFixture(t, refusalcache.Settings{MaxStale: time.Second})
	first := f.exhaust("u1")
	if first.Refused != 0 || first.Wait <= 0 {
		t.Fatalf("refusal: %+v", first)
	}
	f.clk.Advance(100 * time.Millisecond)
	d, local := f.acquire("u1", 1)
	if !local || d.Granted {
		t.Fatalf("want a local refusal, got %+v (local %v)", d, local)
	}
	want := first.Wait - 100*time.Millisecond
	if d.Wait != want || d.Refused != 0 || d.Limits[0].Wait != want || !d.Now.Equal(first.Now.Add(100*time.Millisecond)) {
		t.Fatalf("local refusal %+v, want Wait %v from %+v", d, want, first)
	}
	// The hourly limit did not refuse: 98 left, as at the refusal.
	if d.Limits[1].Remaining != 98 || d.Limits[1].Wait != 0 || d.Limits[1].ResetAfter != first.Limits[1].ResetAfter-100*time.Millisecond {
		t.Fatalf("hourly limit %+v, refusal's %+v", d.Limits[1], first.Limits[1])
	}
	// Another key, and another count of permits, go to the store.
	if _, local := f.acquire("u2", 1); local {
		t.Fatal("another key answered locally")
	}
	if _, local := f.acquire("u1", 2); local {
		t.Fatal("a call for 2 permits answered from a refusal of 1")
	}
	// Once the permit frees, the store grants it.
	f.clk.Advance(want)
	if d, local := f.acquire("u1", 1); !d.Granted || local {
		t.Fatalf("after the retry-after: %+v (local %v)", d, local)
	}
	st := f.cache.Stats()
	if st.LocalKeyRefusals != 1 || st.LocalRefusals != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestKeyedCallThatMayWaitAsksTheStore(t *testing.T) {
	f := newKeyFixture(t, refusalcache.Settings{})
	f.exhaust("u1")
	before := f.cache.Stats().LocalKeyRefusals
	d, err := f.cache.AcquireKey(context.Background(), redlimit.PolicyKey{Policy: "api", Key: "u1"}, f.known, 1, time.Millisecond)
	if err != nil || d.Granted || f.cache.Stats().LocalKeyRefusals != before {
		t.Fatalf("%+v %v: a call that may wait must reach the store", d, err)
	}
}

func TestKeyedEntryDroppedByChanges(t *testing.T) {
	ctx := context.Background()
	k := redlimit.PolicyKey{Policy: "api", Key: "u1"}
	for _, c := range []struct {
		name   string
		change func(f *keyFixture)
	}{
		{"ReleaseKey", func(f *keyFixture) { _, _ = f.cache.ReleaseKey(ctx, k, f.known, 1) }},
		{"CancelKey", func(f *keyFixture) { _, _ = f.cache.CancelKey(ctx, k, f.known, f.clk.Now(), 1) }},
		{"SetPolicy", func(f *keyFixture) {
			f.known = f.setPolicy(redlimit.PerSecond(3), redlimit.PerInterval(100, time.Hour))
		}},
		{"DeletePolicy", func(f *keyFixture) { _, _ = f.cache.DeletePolicy(ctx, "api") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newKeyFixture(t, refusalcache.Settings{MaxStale: time.Hour})
			f.exhaust("u1")
			if f.cache.Stats().KeyEntries != 1 {
				t.Fatalf("stats %+v", f.cache.Stats())
			}
			c.change(f)
			if st := f.cache.Stats(); st.KeyEntries != 0 {
				t.Fatalf("after %s: %+v", c.name, st)
			}
			if _, local := f.acquire("u1", 1); local {
				t.Fatalf("answered locally after %s", c.name)
			}
		})
	}
}

// A change made by another process (here: straight on the store) is seen
// MaxStale after the refusal at the latest; meanwhile the cache refuses,
// never grants.
func TestKeyedStaleAtMostMaxStale(t *testing.T) {
	f := newKeyFixture(t, refusalcache.Settings{MaxStale: 10 * time.Millisecond})
	f.exhaust("u1")
	k := redlimit.PolicyKey{Policy: "api", Key: "u1"}
	if got, err := f.mem.ReleaseKey(context.Background(), k, f.known, 1); err != nil || got != 1 {
		t.Fatalf("release elsewhere: %d %v", got, err)
	}
	f.clk.Advance(9 * time.Millisecond)
	if d, local := f.acquire("u1", 1); d.Granted || !local {
		t.Fatalf("within MaxStale: %+v (local %v)", d, local)
	}
	f.clk.Advance(time.Millisecond)
	if d, local := f.acquire("u1", 1); !d.Granted || local {
		t.Fatalf("at MaxStale: %+v (local %v)", d, local)
	}
}

// A version of the policy the cache did not see (set by another process)
// drops the entries as soon as a caller or an answer shows it.
func TestKeyedNewerVersionDropsEntries(t *testing.T) {
	f := newKeyFixture(t, refusalcache.Settings{MaxStale: time.Hour})
	f.exhaust("u1")
	f.exhaust("u2")
	stored, _, err := f.mem.SetPolicy(context.Background(), "api", redlimit.PolicyConfig{Limits: []redlimit.Config{redlimit.PerSecond(5)}}, redlimit.SetKeepState)
	if err != nil {
		t.Fatal(err)
	}
	f.known = stored
	if d, local := f.acquire("u1", 1); !d.Granted || local {
		t.Fatalf("newer policy known: %+v (local %v)", d, local)
	}
	if st := f.cache.Stats(); st.KeyEntries != 0 {
		t.Fatalf("entries of the old version kept: %+v", st)
	}
}

func TestKeyedEntriesBounded(t *testing.T) {
	f := newKeyFixture(t, refusalcache.Settings{MaxStale: time.Hour, MaxKeyEntries: 3})
	for i := range 5 {
		f.exhaust(fmt.Sprint("u", i))
	}
	if st := f.cache.Stats(); st.KeyEntries != 3 {
		t.Fatalf("want 3 entries at most: %+v", st)
	}
	// Once past their end they make room.
	f.clk.Advance(time.Second)
	f.exhaust("u9")
	if st := f.cache.Stats(); st.KeyEntries > 3 {
		t.Fatalf("%+v", st)
	}
	if _, local := f.acquire("u9", 1); !local {
		t.Fatal("a refusal made after the others expired was not cached")
	}
}

func TestKeyedNeedsPolicyStore(t *testing.T) {
	cache, err := refusalcache.New(storeOnly{memstore.New()}, refusalcache.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cache.AcquireKey(context.Background(), redlimit.PolicyKey{Policy: "api", Key: "u"}, redlimit.PolicyConfig{}, 1, 0)
	if !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatalf("got %v, want ErrInvalidArgument", err)
	}
	if _, err := refusalcache.New(memstore.New(), refusalcache.Settings{MaxKeyEntries: -1}); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatalf("negative MaxKeyEntries: %v", err)
	}
}

// storeOnly hides every method of a store but redlimit.Store's.
type storeOnly struct{ redlimit.Store }

// Keys refused once and never asked again do not hold memory: their
// entries are swept once past their end.
func TestKeyedEntriesSwept(t *testing.T) {
	f := newKeyFixture(t, refusalcache.Settings{MaxStale: time.Hour})
	for i := range 3000 {
		f.exhaust(fmt.Sprint("u", i))
		if i%500 == 499 {
			f.clk.Advance(time.Second) // every entry so far ends
		}
	}
	// The sweeps ran as the entries doubled: what is left is at most
	// twice the entries made since the last second passed.
	if st := f.cache.Stats(); st.KeyEntries > 1024 {
		t.Fatalf("entries past their end kept: %+v", st)
	}
}
