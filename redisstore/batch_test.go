package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/memstore"
)

// TestBatchDifferential: a batch of calls in one script run answers each
// call as the Go rules (the memory store) answer the same calls made one by
// one at the batch's instant; every algorithm, random batches.
func TestBatchDifferential(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	var batches, calls int
	for trace := 0; trace < 150; trace++ {
		rng := rand.New(rand.NewPCG(uint64(trace), 99))
		clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		mem := memstore.New(memstore.WithClock(clk))
		red, _ := New(rdb, WithPrefix(fmt.Sprintf("batch%d:", trace)), WithClock(clk))
		alg := redlimit.Algorithms[trace%len(redlimit.Algorithms)]
		cfg := redlimit.PerInterval(1+rng.Int64N(8), time.Duration(1+rng.Int64N(30))*time.Millisecond).WithAlgorithm(alg)
		if rng.IntN(2) == 0 {
			cfg = cfg.WithMode(redlimit.PerClient)
		}
		key := redlimit.Key{Name: "b", Client: "c"}
		mc, _, _ := mem.SetConfig(ctx, key.Name, cfg, redlimit.SetResetState)
		rc, _, _ := red.SetConfig(ctx, key.Name, cfg, redlimit.SetResetState)
		most := mc.MaxPermits()
		var reserved []redlimit.Decision
		for step := 0; step < 40; step++ {
			clk.Advance(time.Duration(rng.Int64N(12)) * time.Millisecond)
			k := 1 + rng.IntN(8)
			batch := make([]call, k)
			want := make([]string, k)
			for i := range batch {
				n := 1 + rng.Int64N(most+1)
				switch p := rng.IntN(10); {
				case p < 6:
					wait := []int64{0, -1, rng.Int64N(40)}[rng.IntN(3)]
					batch[i] = call{"acquire", n, wait}
					maxWait := time.Duration(wait) * time.Millisecond
					if wait < 0 {
						maxWait = -1
					}
					d, err := mem.Acquire(ctx, key, mc, n, maxWait)
					if errors.Is(err, redlimit.ErrPermitsExceedRate) {
						want[i] = "too many"
						continue
					}
					if d.Granted && d.Wait > 0 {
						reserved = append(reserved, d)
					}
					want[i] = fmt.Sprint(d.Granted, d.Remaining, d.Wait.Milliseconds(), atMS(d))
				case p < 7 && len(reserved) > 0:
					d := reserved[rng.IntN(len(reserved))]
					batch[i] = call{"cancel", n, d.At.UnixMilli()}
					got, _ := mem.Cancel(ctx, key, mc, d.At, n)
					want[i] = fmt.Sprint("cancel ", got)
				case p < 8:
					batch[i] = call{"release", n, 0}
					got, _ := mem.Release(ctx, key, mc, n)
					want[i] = fmt.Sprint("release ", got)
				default:
					batch[i] = call{"available", 0, 0}
					got, _, _ := mem.Available(ctx, key, mc)
					want[i] = fmt.Sprint("available ", got)
				}
			}
			rs, err := red.runCalls(ctx, key, rc, batch)
			if err != nil {
				t.Fatalf("trace %d step %d: %v", trace, step, err)
			}
			for i, r := range rs {
				var got string
				switch c := batch[i]; {
				case r.code == -2:
					got = "too many"
				case c.op == "acquire":
					at := int64(0)
					if r.code == 1 {
						at = r.at
					}
					got = fmt.Sprint(r.code == 1, r.value, r.wait, at)
				case c.op == "cancel":
					got = fmt.Sprint("cancel ", r.value)
				case c.op == "release":
					got = fmt.Sprint("release ", r.value)
				default:
					got = fmt.Sprint("available ", r.value)
				}
				if got != want[i] {
					t.Fatalf("trace %d (%v) step %d call %d of %d %+v: redis %q, Go rules %q", trace, cfg, step, i, k, batch[i], got, want[i])
				}
			}
			batches++
			calls += k
		}
	}
	t.Logf("%d batches, %d calls, every answer identical", batches, calls)
}

func atMS(d redlimit.Decision) int64 {
	if !d.Granted {
		return 0
	}
	return d.At.UnixMilli()
}
