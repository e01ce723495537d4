package redlimit_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/algorithm"
)

// TestCapsKeepMicrosecondProductsExact: the buckets and the sliding counter
// multiply counts by the interval in µs, which must stay within 2^53 (exact
// in Lua); the fixed window and the sliding log multiply nothing and take
// MaxRate whatever the interval.
func TestCapsKeepMicrosecondProductsExact(t *testing.T) {
	day := 24 * time.Hour
	perDay := algorithm.MaxExact / day.Microseconds() // 104249
	perSecond := algorithm.MaxExact / time.Second.Microseconds()
	for _, tc := range []struct {
		cfg redlimit.Config
		ok  bool
	}{
		{redlimit.TokenBucketConfig(perDay, day, 0), true},
		{redlimit.TokenBucketConfig(perDay+1, day, 0), false},
		{redlimit.TokenBucketConfig(1, day, perDay+1), false},
		{redlimit.LeakyBucketConfig(1, day, perDay+1), false},
		{redlimit.PerInterval(perDay, day).WithAlgorithm(redlimit.SlidingCounter), true},
		{redlimit.PerInterval(perDay+1, day).WithAlgorithm(redlimit.SlidingCounter), false},
		{redlimit.TokenBucketConfig(perSecond, time.Second, 0), true},
		{redlimit.TokenBucketConfig(perSecond+1, time.Second, 0), false},
		{redlimit.TokenBucketConfig(1000, time.Millisecond, 1), true}, // 10^6 per second
		{redlimit.PerInterval(algorithm.MaxRate, day).WithAlgorithm(redlimit.FixedWindow), true},
		{redlimit.PerInterval(algorithm.MaxRate, day), true},
	} {
		_, err := tc.cfg.Normalize()
		if tc.ok && err != nil || !tc.ok && !errors.Is(err, redlimit.ErrInvalidArgument) {
			t.Errorf("Normalize(%v) = %v; want ok %v", tc.cfg, err, tc.ok)
		}
	}
	if perDay != 104249 {
		t.Errorf("at most %d per day; the docs say 104249", perDay)
	}
}

// BenchmarkNormalize: a Redis store normalizes the known config on every
// call.
func BenchmarkNormalize(b *testing.B) {
	for _, c := range []redlimit.Config{redlimit.PerSecond(10), redlimit.TokenBucketConfig(10, time.Second, 0), redlimit.LeakyBucketConfig(10, time.Second, 5)} {
		n, _ := c.Normalize()
		b.Run(string(c.Algorithm), func(b *testing.B) {
			for b.Loop() {
				if _, err := c.Normalize(); err != nil {
					b.Fatal(err)
				}
			}
		})
		c = n
		b.Run(string(c.Algorithm)+"/normalized", func(b *testing.B) {
			for b.Loop() {
				if _, err := c.Normalize(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
