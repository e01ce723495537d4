package redlimit_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/algorithm"
)

// FuzzConfig: any config is either normalized into one every store can run,
// or refused with an ErrInvalidArgument; never a panic.
func FuzzConfig(f *testing.F) {
	f.Add("sliding-log", 0, int64(10), int64(1000), int64(0), int64(0))
	f.Add("token-bucket", 1, int64(5), int64(86400000), int64(7), int64(0))
	f.Add("leaky-bucket", 0, int64(1), int64(1), int64(0), int64(3))
	f.Add("x", 9, int64(-1), int64(-5), int64(-1), int64(1<<62))
	f.Fuzz(func(t *testing.T, alg string, mode int, rate, intervalMS, burst, capacity int64) {
		c := redlimit.Config{Algorithm: redlimit.Algorithm(alg), Mode: redlimit.Mode(mode), Rate: rate,
			Interval: time.Duration(intervalMS) * time.Millisecond, Burst: burst, Capacity: capacity}
		n, err := c.Normalize()
		if err != nil {
			if !errors.Is(err, redlimit.ErrInvalidArgument) {
				t.Fatalf("Normalize(%+v) = %v: not an ErrInvalidArgument", c, err)
			}
			return
		}
		if n.Rate < 1 || n.Rate > algorithm.MaxRate || n.Interval < time.Millisecond || n.MaxPermits() < 1 {
			t.Fatalf("Normalize(%+v) accepted %+v", c, n)
		}
		spec := algorithm.Lookup(string(n.Algorithm))
		if spec == nil || n.Interval < spec.MinInterval || n.Interval > spec.MaxInterval {
			t.Fatalf("Normalize(%+v) accepted %+v: outside its algorithm's bounds", c, n)
		}
		if most := spec.MaxCountTimesInterval; most != 0 && max(n.Rate, n.Burst, n.Capacity) > most/int64(n.Interval/spec.Unit) {
			t.Fatalf("Normalize(%+v) accepted %+v: counts times the interval in %s beyond %d", c, n, spec.UnitName(), most)
		}
		if n.Burst != 0 && spec.Params&algorithm.Burst == 0 || n.Capacity != 0 && spec.Params&algorithm.Capacity == 0 {
			t.Fatalf("Normalize(%+v) accepted %+v: a parameter %s does not take", c, n, spec.Name)
		}
		if again, err := n.Normalize(); err != nil || again != n {
			t.Fatalf("Normalize is not idempotent: %+v -> %+v, %v", n, again, err)
		}
		if _ = n.String(); !n.SameLimit(n) {
			t.Fatalf("SameLimit(%+v) with itself is false", n)
		}
	})
}

// FuzzName: any name is valid or a typed error.
func FuzzName(f *testing.F) {
	f.Add("api")
	f.Add("")
	f.Add("{a}\x00\xff")
	f.Fuzz(func(t *testing.T, name string) {
		err := (redlimit.Key{Name: name}).ValidateName()
		if (err == nil) != (len(name) >= 1 && len(name) <= 1024) {
			t.Fatalf("ValidateName(%q) = %v", name, err)
		}
		if err != nil && !errors.Is(err, redlimit.ErrInvalidArgument) {
			t.Fatalf("ValidateName(%q) = %v: untyped", name, err)
		}
	})
}
