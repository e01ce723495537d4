package storetest

import (
	"time"

	"github.com/redlimit/redlimit"
)

// timeCases are the conformance cases on how stores count time: SetRate's
// accounting of the time before a change.
var timeCases = []struct {
	name string
	fn   func(*env)
}{
	{"SetRateAccountsThePastAtTheOldRate", testSetRateAccountsThePast},
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
