package storetest

import (
	"fmt"
	"time"

	"github.com/redlimit/redlimit"
)

// testMicrosecondTokenBucket: 3000 per second, burst 1, asked every 100 µs:
// a token every 333.3 µs, taken by the next call, 2500 per second as
// x/time/rate's NewLimiter(3000, 1) grants (a store counting whole ms held
// one token per ms: 1000).
func testMicrosecondTokenBucket(e *env) {
	l := e.configured("us-tb", redlimit.TokenBucketConfig(3000, time.Second, 1))
	granted := 0
	var retry []time.Duration
	for i := 0; i < 2000; i++ { // 200 ms
		r := e.try(l, 1)
		if r.Allowed {
			granted++
		} else if len(retry) < 3 {
			retry = append(retry, r.RetryAfter)
		}
		e.clock.Advance(100 * time.Microsecond)
	}
	if granted != 500 {
		e.t.Fatalf("%d granted in 200 ms at 3000/s, burst 1, asked every 100 µs; want 500", granted)
	}
	// The first refusals, 100, 200 and 300 µs after a grant, wait for the
	// token at 333.3 µs, to the µs.
	if want := []time.Duration{234 * time.Microsecond, 134 * time.Microsecond, 34 * time.Microsecond}; fmt.Sprint(retry) != fmt.Sprint(want) {
		e.t.Fatalf("retry-afters %v; want %v", retry, want)
	}
}

// testMicrosecondLeakyBucket: 12 per 10 ms (833.3 µs apart), capacity 18.
// After 11 permits at 24 ms, 17 more fit the queue at 33 ms, but the work
// ahead drains only at 33.1667 ms: not granted before 33.167 ms.
func testMicrosecondLeakyBucket(e *env) {
	l := e.configured("us-lb", redlimit.LeakyBucketConfig(12, 10*time.Millisecond, 18))
	e.clock.Advance(24 * time.Millisecond)
	if r := e.try(l, 11); !r.Allowed {
		e.t.Fatalf("11 at 24 ms: %+v", r)
	}
	e.clock.Advance(9 * time.Millisecond)
	if r := e.try(l, 17); r.Allowed || r.RetryAfter != 167*time.Microsecond {
		e.t.Fatalf("17 at 33 ms: %+v; want refused, retry after 167µs", r)
	}
	e.clock.Advance(166 * time.Microsecond)
	if r := e.try(l, 17); r.Allowed || r.RetryAfter != time.Microsecond {
		e.t.Fatalf("17 at 33.166 ms: %+v; want refused, retry after 1µs", r)
	}
	e.clock.Advance(time.Microsecond)
	if r := e.try(l, 17); !r.Allowed {
		e.t.Fatalf("17 at 33.167 ms: %+v; want granted", r)
	}
	// At 10^6 per second every µs lets one out, none early.
	l = e.configured("us-lb-fast", redlimit.LeakyBucketConfig(1000, time.Millisecond, 1))
	for i := 0; i < 50; i++ {
		if r := e.try(l, 1); !r.Allowed {
			e.t.Fatalf("call %d, 1 µs after the last grant: %+v", i, r)
		}
		if r := e.try(l, 1); r.Allowed || r.RetryAfter != time.Microsecond {
			e.t.Fatalf("call %d, in the µs of the last grant: %+v; want refused, retry after 1µs", i, r)
		}
		e.clock.Advance(time.Microsecond)
	}
}

// testMicrosecondFixedWindow: the fixed window counts time to the µs too:
// a window of 1 ms ends at its last µs, and a refusal says to the µs when
// the next permit comes.
func testMicrosecondFixedWindow(e *env) {
	e.clock.Advance(400 * time.Microsecond) // T0 + 0.4 ms: inside a 1 ms window
	fw := e.configured("us-fw", redlimit.PerInterval(2, time.Millisecond).WithAlgorithm(redlimit.FixedWindow))
	e.try(fw, 2)
	if r := e.try(fw, 1); r.Allowed || r.RetryAfter != 600*time.Microsecond {
		e.t.Fatalf("fixed window, full at 0.4 ms: %+v; want retry after 600µs", r)
	}
	e.clock.Advance(599 * time.Microsecond)
	if r := e.try(fw, 1); r.Allowed || r.RetryAfter != time.Microsecond {
		e.t.Fatalf("fixed window at 0.999 ms: %+v; want retry after 1µs", r)
	}
	e.clock.Advance(time.Microsecond)
	if r := e.try(fw, 1); !r.Allowed {
		e.t.Fatalf("fixed window at 1 ms, a new window: %+v", r)
	}
}

// testMicrosecondSlidingCounter: the sliding counter counts time to the µs
// too. 4 per 10 ms, at 1 ms into a window: 4 taken. In the next window the
// 4 weigh 4*(10-e)/10; one more fits once that is at most 3: e >= 2.5 ms,
// at 12.5 ms.
func testMicrosecondSlidingCounter(e *env) {
	e.clock.Advance(time.Millisecond) // set at T0 + 1 ms, 1 ms into a window
	sc := e.configured("us-sc", redlimit.PerInterval(4, 10*time.Millisecond).WithAlgorithm(redlimit.SlidingCounter))
	e.clock.Advance(time.Millisecond - e.clock.Now().Sub(T0)%(10*time.Millisecond))
	e.try(sc, 4)
	if r := e.try(sc, 1); r.Allowed || r.RetryAfter != 11500*time.Microsecond {
		e.t.Fatalf("sliding counter, full at 1 ms: %+v; want retry after 11.5ms", r)
	}
}

// testSlidingLogMilliseconds: the sliding log keeps one entry per ms, so
// its times are whole milliseconds: a request within a millisecond counts
// at its start, and a retry-after is a whole number of milliseconds.
func testSlidingLogMilliseconds(e *env) {
	e.clock.Advance(300 * time.Microsecond)
	l := e.configured("ms-log", redlimit.PerInterval(1, 10*time.Millisecond))
	e.try(l, 1) // at T0 + 0.3 ms: counts at T0, free again at T0 + 10 ms
	e.clock.Advance(500 * time.Microsecond)
	if r := e.try(l, 1); r.Allowed || r.RetryAfter != 10*time.Millisecond {
		e.t.Fatalf("at 0.8 ms: %+v; want retry after 10ms (from the start of the ms)", r)
	}
	e.clock.Advance(9200 * time.Microsecond) // T0 + 10 ms
	if r := e.try(l, 1); !r.Allowed {
		e.t.Fatalf("at 10 ms: %+v; want granted", r)
	}
}

// testSetRateAccountsThePast: SetRate keeping the state counts the time up
// to the change at the old rate, as x/time/rate's SetLimitAt does, for the
// Overall state and a client's, and for changes made by another client.
func testSetRateAccountsThePast(e *env) {
	for _, mode := range []redlimit.Mode{redlimit.Overall, redlimit.PerClient} {
		// 1/s, burst 10, emptied; raised to 100/s 5 s later: 5 tokens.
		name := "tb-raised-" + mode.String()
		l := e.configured(name, redlimit.TokenBucketConfig(1, time.Second, 10).WithMode(mode))
		if r := e.try(l, 10); !r.Allowed {
			e.t.Fatalf("%s: emptying the bucket: %+v", name, r)
		}
		e.clock.Advance(5 * time.Second)
		admin := e.limiter(name, redlimit.WithClientID("admin"))
		if err := admin.SetRate(e.ctx, redlimit.TokenBucketConfig(100, time.Second, 10).WithMode(mode)); err != nil {
			e.t.Fatal(err)
		}
		if n := e.available(l); n != 5 {
			e.t.Fatalf("%s: %d tokens at the change, want 5 (5 s at the old 1/s)", name, n)
		}
		e.clock.Advance(20 * time.Millisecond)
		if n := e.available(l); n != 7 {
			e.t.Fatalf("%s: %d tokens 20 ms after the change, want 7", name, n)
		}
		if mode == redlimit.Overall {
			// Lowered again with no grant in between: the 20 ms at 100/s
			// still count (the Overall state was brought to the first
			// change when it was made).
			if err := admin.SetRate(e.ctx, redlimit.TokenBucketConfig(1, time.Second, 10).WithMode(mode)); err != nil {
				e.t.Fatal(err)
			}
			e.clock.Advance(time.Second)
			if n := e.available(l); n != 8 {
				e.t.Fatalf("%s: %d tokens 1 s after lowering it again, want 8", name, n)
			}
		}

		// 10/s, burst 10, emptied; lowered to 1/s 500 ms later: 5 tokens,
		// 5 still at 1 s (5.5), where the old rate would have refilled it.
		name = "tb-lowered-" + mode.String()
		l = e.configured(name, redlimit.TokenBucketConfig(10, time.Second, 10).WithMode(mode))
		if r := e.try(l, 10); !r.Allowed {
			e.t.Fatalf("%s: emptying the bucket: %+v", name, r)
		}
		e.clock.Advance(500 * time.Millisecond)
		if err := e.limiter(name, redlimit.WithClientID("admin")).SetRate(e.ctx, redlimit.TokenBucketConfig(1, time.Second, 10).WithMode(mode)); err != nil {
			e.t.Fatal(err)
		}
		if n := e.available(l); n != 5 {
			e.t.Fatalf("%s: %d tokens at the change, want 5", name, n)
		}
		e.clock.Advance(500 * time.Millisecond)
		if n := e.available(l); n != 5 {
			e.t.Fatalf("%s: %d tokens 1 s after emptying, want 5 (5.5 at 1/s since the change)", name, n)
		}
		if r := e.try(l, 6); r.Allowed || r.RetryAfter != 500*time.Millisecond {
			e.t.Fatalf("%s: 6 tokens granted or wrong retry-after: %+v; want refused, retry after 500ms", name, r)
		}
	}
}
