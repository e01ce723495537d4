package redisstore_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
	"github.com/redlimit/redlimit/storetest"
)

// commandCounter is a go-redis hook counting the commands a client sends.
type commandCounter struct{ n atomic.Int64 }

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// A keyed call refused by Redis is answered locally to the calls that
// repeat it: no command reaches Redis until the key's permits may have
// been freed (here: a release through the store).
func TestPolicyRefusalAnsweredLocally(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, cached := range []bool{true, false} {
		name := "cached"
		if !cached {
			name = "WithRefusalCache(0)"
		}
		t.Run(name, func(t *testing.T) {
			rdb := srv.Client(t)
			counter := &commandCounter{}
			rdb.AddHook(counter)
			clk := clock.NewFake(storetest.T0)
			opts := []redisstore.Option{redisstore.WithTimeSource(clk), redisstore.WithPolicyMaxAge(time.Hour)}
			if !cached {
				opts = append(opts, redisstore.WithRefusalCache(0))
			}
			s := newStore(t, rdb, opts...)
			limits := []redlimit.Config{redlimit.PerSecond(2), redlimit.TokenBucketConfig(100, time.Hour, 100)}
			// Stored by another process (no notification reaches s, which
			// has not subscribed yet).
			other, err := redisstore.New(srv.Client(t), redisstore.WithPrefix(s.Prefix()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = other.Close() })
			known, _, err := other.SetPolicy(ctx, "api", redlimit.PolicyConfig{Limits: limits}, redlimit.SetResetState)
			if err != nil {
				t.Fatal(err)
			}
			k := redlimit.PolicyKey{Policy: "api", Key: "user-1"}
			for range 2 {
				if d, err := s.AcquireKey(ctx, k, known, 1, 0); err != nil || !d.Granted {
					t.Fatalf("%+v %v", d, err)
				}
			}
			first, err := s.AcquireKey(ctx, k, known, 1, 0)
			if err != nil || first.Granted || first.Refused != 0 || first.Cached {
				t.Fatalf("want a refusal by the first limit, from Redis: %+v %v", first, err)
			}
			sent, before := counter.n.Load(), s.Stats()
			clk.Advance(10 * time.Millisecond)
			for range 100 {
				d, err := s.AcquireKey(ctx, k, known, 1, 0)
				if err != nil || d.Granted || d.Refused != 0 || d.Wait != first.Wait-10*time.Millisecond || d.Cached != cached {
					t.Fatalf("repeated call: %+v %v, first refusal %+v", d, err, first)
				}
			}
			st := s.Stats()
			if !cached {
				if counter.n.Load()-sent < 100 || st.LocalKeyRefusals != 0 {
					t.Fatalf("cache off: %d commands for 100 calls, %+v", counter.n.Load()-sent, st)
				}
				return
			}
			if got := counter.n.Load() - sent; got != 0 {
				t.Fatalf("%d commands sent for 100 repeated refusals", got)
			}
			if st.LocalKeyRefusals-before.LocalKeyRefusals != 100 || st.LocalRefusals-before.LocalRefusals != 100 || st.Calls != before.Calls {
				t.Fatalf("stats before %+v, after %+v", before, st)
			}
			// A release through the store may free a permit: the next
			// call asks Redis again.
			if _, err := s.ReleaseKey(ctx, k, known, 1); err != nil {
				t.Fatal(err)
			}
			sent = counter.n.Load()
			if d, err := s.AcquireKey(ctx, k, known, 1, 0); err != nil || !d.Granted {
				t.Fatalf("after a release: %+v %v", d, err)
			}
			if counter.n.Load() == sent {
				t.Fatal("the call after a release did not reach Redis")
			}
		})
	}
}

// A waiting call on several limits reserves on all of them in one command
// (one script run), and its hand-back is one more.
func TestPolicyReservationOneRoundTrip(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	counter := &commandCounter{}
	rdb.AddHook(counter)
	ctx := context.Background()
	clk := clock.NewFake(storetest.T0)
	s := newStore(t, rdb, redisstore.WithTimeSource(clk), redisstore.WithPolicyMaxAge(time.Hour))
	known, _, err := s.SetPolicy(ctx, "api", redlimit.PolicyConfig{Limits: []redlimit.Config{
		redlimit.TokenBucketConfig(2, time.Second, 2), redlimit.PerInterval(2, 10*time.Second)}}, redlimit.SetResetState)
	if err != nil {
		t.Fatal(err)
	}
	k := redlimit.PolicyKey{Policy: "api", Key: "user-1"}
	for range 2 {
		if d, err := s.AcquireKey(ctx, k, known, 1, 0); err != nil || !d.Granted || d.Wait != 0 {
			t.Fatalf("%+v %v", d, err)
		}
	}
	sent := counter.n.Load()
	d, err := s.AcquireKey(ctx, k, known, 1, time.Hour)
	if err != nil || !d.Granted || d.Wait != 10*time.Second || d.Limits[0].Wait != d.Wait || d.Limits[1].Wait != d.Wait {
		t.Fatalf("reservation %+v, %v; want both limits held at 10s", d, err)
	}
	if got := counter.n.Load() - sent; got != 1 {
		t.Fatalf("%d commands for a reservation on two limits; want 1", got)
	}
	sent = counter.n.Load()
	if got, err := s.CancelKey(ctx, k, known, d.At, 1); err != nil || got != 1 {
		t.Fatalf("CancelKey = %d, %v; want 1", got, err)
	}
	if got := counter.n.Load() - sent; got != 1 {
		t.Fatalf("%d commands for a hand-back on two limits; want 1", got)
	}
	st, err := s.StatusKey(ctx, k, known)
	if err != nil || st.Limits[0].Remaining != 0 || st.Limits[0].ResetAfter != time.Second || st.Limits[1].Remaining != 0 || st.Limits[1].ResetAfter != 10*time.Second {
		t.Fatalf("status after the hand-back %+v, %v; want the two grants alone", st, err)
	}
}
