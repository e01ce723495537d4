package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
)

// The refusal cache itself (package refusalcache) is tested in front of the
// memory store; these tests hold the Redis store's use of it: its calls,
// batched or not, reach Redis through the cache.

// TestRefusalCacheAfterRelease: a release made through the store while a
// refusal of the same limiter is in flight leaves no cached refusal behind,
// even when the release's caller sees its reply before the refusal's caller
// sees the refusal. A proxy holds the refusal's reply back after Redis made
// the refusal, the release (another client of the limiter, so another lane
// and connection) completes, then the refusal's reply goes on: the permit
// released must then be granted, by Redis, not refused from the cache.
func TestRefusalCacheAfterRelease(t *testing.T) {
	srv := redistest.Start(t)
	for _, batching := range []bool{true, false} {
		t.Run(fmt.Sprintf("batching=%v", batching), func(t *testing.T) {
			proxy := startHoldProxy(t, srv.Addr)
			rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1})
			t.Cleanup(func() { _ = rdb.Close() })
			ctx := context.Background()
			// A fixed clock: the release hands back exactly the permit
			// taken, and the refusal would stay cached.
			clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
			opts := []Option{WithPrefix(fmt.Sprintf("rel-%v:", batching)), WithTimeSource(clk)}
			if !batching {
				opts = append(opts, WithoutBatching())
			}
			s, err := New(rdb, opts...)
			if err != nil {
				t.Fatal(err)
			}
			tb, err := redlimit.TokenBucketConfig(1, time.Hour, 1).Normalize()
			if err != nil {
				t.Fatal(err)
			}
			a, _ := redlimit.New(s, "r", redlimit.WithConfig(tb), redlimit.WithClientID("a"))
			if r, err := a.TryAcquire(ctx, 1); err != nil || !r.Allowed {
				t.Fatalf("first permit: %+v, %v", r, err)
			}

			held := proxy.Arm()
			type answer struct {
				r   redlimit.Result
				err error
			}
			refused := make(chan answer, 1)
			go func() {
				r, err := a.TryAcquire(ctx, 1)
				refused <- answer{r, err}
			}()
			<-held // Redis refused; the caller has not seen it yet
			// Straight to the store, as another client's Release reaches it
			// (a Limiter releases only what it holds itself).
			got, err := s.Release(ctx, redlimit.Key{Name: "r", Client: "b"}, tb, 1, time.Time{})
			proxy.Release()
			ans := <-refused
			if err != nil || got != 1 {
				t.Fatalf("Release(1) = %d, %v", got, err)
			}
			if ans.err != nil || ans.r.Allowed {
				t.Fatalf("the call made before the release: %+v, %v; want a refusal", ans.r, ans.err)
			}

			if r, err := a.TryAcquire(ctx, 1); err != nil || !r.Allowed {
				t.Fatalf("after the release: %+v, %v; want the released permit (local refusals: %d)", r, err, s.Stats().LocalRefusals)
			}
		})
	}
}

// TestRefusalCacheFullQueue: a leaky bucket whose queue is full refuses
// TryAcquire locally, as any exhausted limiter, while a call that may wait
// still asks the store and learns that the queue is full.
func TestRefusalCacheFullQueue(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	s, err := New(rdb, WithTimeSource(clk))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := redlimit.LeakyBucketConfig(1, time.Second, 2).Normalize()
	if err != nil {
		t.Fatal(err)
	}
	key := redlimit.Key{Name: "full", Client: "c"}
	for i := 0; ; i++ {
		d, err := s.Acquire(ctx, key, cfg, 1, -1)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Granted {
			if !d.Full {
				t.Fatalf("call %d refused, not as full: %+v", i, d)
			}
			break
		}
	}
	calls := s.Stats().Calls
	for i := 0; i < 3; i++ {
		if d, err := s.Acquire(ctx, key, cfg, 1, 0); err != nil || d.Granted {
			t.Fatalf("TryAcquire on a full queue: %+v, %v", d, err)
		}
	}
	if st := s.Stats(); st.LocalRefusals != 3 || st.Calls-calls != 3 {
		t.Fatalf("3 TryAcquires on a full queue: %+v; want all 3 answered locally", st)
	}
	d, err := s.Acquire(ctx, key, cfg, 1, time.Hour)
	if err != nil || d.Granted || !d.Full {
		t.Fatalf("a call that may wait an hour: %+v, %v; want refused by the store as full", d, err)
	}
	if got := s.Stats().LocalRefusals; got != 3 {
		t.Fatalf("the waiting call was answered locally (%d local refusals)", got)
	}
}
