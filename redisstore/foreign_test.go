package redisstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/redistest"
)

// TestForeignClientData: keys of PerClient clients that hold data redlimit
// did not write, without a TTL, leave those clients on ErrCorrupt until
// SetRate(ResetState) or Delete removes them; nothing else goes with them.
func TestForeignClientData(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	s := newStore(t, rdb)
	// A name SCAN would read as a pattern matching the other limiter's keys.
	const name, other = "x*[y]", "xzy"
	cfg := redlimit.PerMinute(10).WithMode(redlimit.PerClient)
	limiter := func(name, client string) *redlimit.Limiter {
		l, err := redlimit.New(s, name, redlimit.WithConfig(cfg), redlimit.WithClientID(client))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	base := s.Prefix() + "{" + name + "}:"
	otherKey := s.Prefix() + "{" + other + "}:client:c"
	spoil := func() {
		rdb.HSet(ctx, base+"client:c", "x", "1") // a hash where a string belongs
		rdb.RPush(ctx, base+"client:d", "x")     // a list where a string belongs
		rdb.HSet(ctx, otherKey, "x", "1")
	}
	c, d, healthy := limiter(name, "c"), limiter(name, "d"), limiter(name, "e")
	check := func(when string, want error) {
		t.Helper()
		for _, l := range []*redlimit.Limiter{c, d} {
			r, err := l.TryAcquire(ctx, 1)
			if want == nil && (err != nil || !r.Allowed) || want != nil && !errors.Is(err, want) {
				t.Errorf("%s, client %s: %+v, %v; want %v", when, l.ClientID(), r, err, want)
			}
		}
	}
	if err := c.SetRate(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	spoil()
	check("foreign data", redlimit.ErrCorrupt)
	if err := c.SetRate(ctx, cfg, redlimit.ResetState()); err != nil {
		t.Fatal(err)
	}
	check("after SetRate(ResetState)", nil)

	spoil()
	if _, err := healthy.TryAcquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.SetRate(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	check("after Delete", nil)
	if n := rdb.Exists(ctx, base+"client:e", otherKey).Val(); n != 2 {
		t.Errorf("Delete took %d of 2 keys redlimit wrote or another limiter holds", 2-n)
	}
}
