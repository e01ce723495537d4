package redlimit

import (
	"fmt"
	"math/bits"
	"strings"
	"time"

	"github.com/redlimit/redlimit/algorithm"
	"github.com/redlimit/redlimit/algorithm/fixedwindow"
	"github.com/redlimit/redlimit/algorithm/leakybucket"
	"github.com/redlimit/redlimit/algorithm/slidingcounter"
	"github.com/redlimit/redlimit/algorithm/slidinglog"
	"github.com/redlimit/redlimit/algorithm/tokenbucket"
)

// Mode says who shares a limit.
type Mode int

const (
	// Overall: one limit shared by every client of the limiter (Redisson's
	// RateType.OVERALL).
	Overall Mode = iota
	// PerClient: each client (each Limiter value, by its client ID) gets a
	// limit of its own under the same name (RateType.PER_CLIENT).
	PerClient
)

// String returns "overall" or "per-client".
func (m Mode) String() string {
	switch m {
	case Overall:
		return "overall"
	case PerClient:
		return "per-client"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode reads "overall" or "per-client" (case-insensitive; "per_client"
// is accepted too).
func ParseMode(s string) (Mode, error) {
	switch strings.ReplaceAll(strings.ToLower(s), "_", "-") {
	case "overall":
		return Overall, nil
	case "per-client":
		return PerClient, nil
	}
	return 0, &ArgumentError{Arg: "mode", Value: s, Reason: `must be "overall" or "per-client"`, Kind: ErrInvalidArgument}
}

// Algorithm names a rate-limiting algorithm.
type Algorithm string

// The algorithms built in, in the order of Algorithms. Each one's package
// algorithm/<name> holds its rules and its Spec (package algorithm's
// registry: limits, defaults, what a SetRate does to its state); the
// README's algorithm guide compares them.
const (
	// SlidingLog grants at most Rate permits in any window of Interval: a
	// grant returns to the pool Interval after it was made (Redisson's
	// semantics). Exact; memory up to one entry per ms of the window.
	SlidingLog Algorithm = slidinglog.Name
	// FixedWindow grants at most Rate permits per window of Interval aligned
	// to the clock (whole seconds, minutes, hours, UTC days). One counter;
	// up to 2 x Rate across a window boundary.
	FixedWindow Algorithm = fixedwindow.Name
	// SlidingCounter weighs the previous fixed window by its overlap with the
	// sliding one. O(1), approximate.
	SlidingCounter Algorithm = slidingcounter.Name
	// TokenBucket holds Burst tokens, refilled at Rate per Interval; a request
	// takes n. Bursts up to Burst, Rate in the long run.
	TokenBucket Algorithm = tokenbucket.Name
	// LeakyBucket queues requests and lets them out evenly, Interval/Rate
	// apart, holding at most Capacity permits waiting. No bursts.
	LeakyBucket Algorithm = leakybucket.Name
)

// ParseAlgorithm reads an algorithm's name (case-insensitive): one of
// Algorithms, or another registered with package algorithm.
func ParseAlgorithm(s string) (Algorithm, error) {
	if spec := algorithm.Lookup(strings.ToLower(s)); spec != nil {
		return Algorithm(spec.Name), nil
	}
	return "", &ArgumentError{Arg: "algorithm", Value: s, Reason: fmt.Sprintf("must be one of %v", registered()), Kind: ErrInvalidArgument}
}

// Config is a limiter's configuration. It is stored with the limiter, so a
// change reaches every client.
type Config struct {
	// Algorithm defaults to SlidingLog when empty.
	Algorithm Algorithm
	// Mode: Overall (the zero value) or PerClient.
	Mode Mode
	// Rate is the number of permits per Interval, 1..2^40 (algorithm.MaxRate).
	Rate int64
	// Interval is a whole number of milliseconds, MinInterval..MaxInterval
	// (MaxBucketInterval for sliding-counter, token-bucket, leaky-bucket,
	// where Rate, Burst and Capacity times Interval in µs are at most
	// MaxCountTimesInterval).
	Interval time.Duration
	// Burst is the token bucket's capacity: the most permits granted at once
	// after a quiet spell. 0 means Rate. Token bucket only.
	Burst int64
	// Capacity is the most permits the leaky bucket's queue holds waiting.
	// 0 means Rate. Leaky bucket only.
	Capacity int64
	// Epoch identifies the generation of the limiter's state. Stores set it:
	// it changes when the limiter is created or reset, and state left over
	// from another epoch is ignored. Callers leave it zero.
	Epoch int64
}

// PerInterval returns an Overall sliding-log config of rate permits per interval.
func PerInterval(rate int64, interval time.Duration) Config {
	return Config{Algorithm: SlidingLog, Mode: Overall, Rate: rate, Interval: interval}
}

// PerSecond returns an Overall config of rate permits per second.
func PerSecond(rate int64) Config { return PerInterval(rate, time.Second) }

// PerMinute returns an Overall config of rate permits per minute.
func PerMinute(rate int64) Config { return PerInterval(rate, time.Minute) }

// WithMode returns a copy of c with mode m.
func (c Config) WithMode(m Mode) Config { c.Mode = m; return c }

// WithAlgorithm returns a copy of c with algorithm a.
func (c Config) WithAlgorithm(a Algorithm) Config { c.Algorithm = a; return c }

// TokenBucketConfig returns an Overall token bucket of burst tokens refilled
// at rate per interval.
func TokenBucketConfig(rate int64, interval time.Duration, burst int64) Config {
	return Config{Algorithm: TokenBucket, Rate: rate, Interval: interval, Burst: burst}
}

// LeakyBucketConfig returns an Overall leaky bucket letting rate permits
// out per interval, with capacity permits waiting at most.
func LeakyBucketConfig(rate int64, interval time.Duration, capacity int64) Config {
	return Config{Algorithm: LeakyBucket, Rate: rate, Interval: interval, Capacity: capacity}
}

// String prints the config, e.g. "10 per 1s (sliding-log, overall)" or
// "10 per 1s burst 50 (token-bucket, overall)".
func (c Config) String() string {
	alg := c.Algorithm
	if alg == "" {
		alg = SlidingLog
	}
	extra := ""
	if c.Burst != 0 {
		extra += fmt.Sprintf(" burst %d", c.Burst)
	}
	if c.Capacity != 0 {
		extra += fmt.Sprintf(" capacity %d", c.Capacity)
	}
	return fmt.Sprintf("%d per %s%s (%s, %s)", c.Rate, c.Interval, extra, alg, c.Mode)
}

// MaxPermits is the most permits one request can ever be granted: Rate,
// Burst for a token bucket, Capacity for a leaky bucket (the algorithm's
// Spec.MaxPermits). c is normalized.
func (c Config) MaxPermits() int64 {
	spec := algorithm.Lookup(string(c.Algorithm))
	if spec == nil {
		return c.Rate
	}
	return spec.Max(c.limit())
}

// limit is c's Rate, Burst and Capacity as an algorithm.Limit (Interval
// aside: its unit is the algorithm's).
func (c *Config) limit() algorithm.Limit {
	return algorithm.Limit{Rate: c.Rate, Burst: c.Burst, Capacity: c.Capacity}
}

// Equal reports whether c and o are the same config, epoch included: the
// struct's ==, field by field, the one most likely to differ first (the
// struct's own == compares the integers with a call to memequal, on every
// call's hot path). TestConfigEqual holds it to ==.
func (c *Config) Equal(o *Config) bool {
	return c.Epoch == o.Epoch && c.Rate == o.Rate && c.Interval == o.Interval &&
		c.Burst == o.Burst && c.Capacity == o.Capacity && c.Mode == o.Mode && c.Algorithm == o.Algorithm
}

// Normalize fills the defaults and checks every field, returning an
// *ArgumentError (errors.Is ErrInvalidArgument) for the first bad one. The
// algorithm's Spec (package algorithm) says which parameters it takes,
// their defaults and the bounds on its interval.
func (c Config) Normalize() (Config, error) {
	if c.Algorithm == "" {
		c.Algorithm = SlidingLog
	}
	spec := algorithm.Lookup(string(c.Algorithm))
	if spec == nil {
		return c, &ArgumentError{Arg: "algorithm", Value: string(c.Algorithm), Reason: fmt.Sprintf("unknown; one of %v", registered()), Kind: ErrInvalidArgument}
	}
	// The registry's copy of the name: configs compared on every call
	// (a Limiter's known config, a store's) then share it, and their
	// comparison stops at the pointers.
	c.Algorithm = Algorithm(spec.Name)
	if c.Mode != Overall && c.Mode != PerClient {
		return c, &ArgumentError{Arg: "mode", Value: c.Mode.String(), Reason: "unknown mode", Kind: ErrInvalidArgument}
	}
	if c.Rate <= 0 || c.Rate > algorithm.MaxRate {
		return c, &ArgumentError{Arg: "rate", Value: fmt.Sprint(c.Rate), Reason: fmt.Sprintf("must be 1..%d", algorithm.MaxRate), Kind: ErrInvalidArgument}
	}
	switch {
	case c.Interval < spec.MinInterval:
		return c, &ArgumentError{Arg: "interval", Value: c.Interval.String(), Reason: "must be at least " + shortDuration(spec.MinInterval), Kind: ErrInvalidArgument}
	case c.Interval > algorithm.MaxInterval:
		return c, &ArgumentError{Arg: "interval", Value: c.Interval.String(), Reason: "must be at most " + algorithm.MaxInterval.String(), Kind: ErrInvalidArgument}
	case c.Interval%time.Millisecond != 0:
		return c, &ArgumentError{Arg: "interval", Value: c.Interval.String(), Reason: "must be a whole number of milliseconds", Kind: ErrInvalidArgument}
	}
	if c.Burst != 0 && spec.Params&algorithm.Burst == 0 {
		return c, &ArgumentError{Arg: "burst", Value: fmt.Sprint(c.Burst), Reason: "applies to " + takers(algorithm.Burst) + " only", Kind: ErrInvalidArgument}
	}
	if c.Capacity != 0 && spec.Params&algorithm.Capacity == 0 {
		return c, &ArgumentError{Arg: "capacity", Value: fmt.Sprint(c.Capacity), Reason: "applies to " + takers(algorithm.Capacity) + " only", Kind: ErrInvalidArgument}
	}
	if spec.Defaults != nil && (c.Burst == 0 && spec.Params&algorithm.Burst != 0 || c.Capacity == 0 && spec.Params&algorithm.Capacity != 0) {
		d := spec.Defaults(c.limit())
		if spec.Params&algorithm.Burst != 0 {
			c.Burst = d.Burst
		}
		if spec.Params&algorithm.Capacity != 0 {
			c.Capacity = d.Capacity
		}
	}
	if c.Burst < 0 || c.Burst > algorithm.MaxRate {
		return c, &ArgumentError{Arg: "burst", Value: fmt.Sprint(c.Burst), Reason: fmt.Sprintf("must be 1..%d", algorithm.MaxRate), Kind: ErrInvalidArgument}
	}
	if c.Capacity < 0 || c.Capacity > algorithm.MaxRate {
		return c, &ArgumentError{Arg: "capacity", Value: fmt.Sprint(c.Capacity), Reason: fmt.Sprintf("must be 1..%d", algorithm.MaxRate), Kind: ErrInvalidArgument}
	}
	if c.Interval > spec.MaxInterval {
		return c, &ArgumentError{Arg: "interval", Value: c.Interval.String(), Reason: "must be at most " + shortDuration(spec.MaxInterval) + " for " + spec.Name, Kind: ErrInvalidArgument}
	}
	if most := spec.MaxCountTimesInterval; most != 0 {
		units := c.Interval.Microseconds()
		if spec.Unit == time.Millisecond {
			units = c.Interval.Milliseconds()
		}
		if big := max(c.Rate, c.Burst, c.Capacity); big > most/units {
			return c, &ArgumentError{Arg: "rate", Value: fmt.Sprint(big), Reason: fmt.Sprintf("times the interval in %s must stay below %s for %s (at most %d per %s)", spec.UnitName(), power(most), spec.Name, most/units, c.Interval), Kind: ErrInvalidArgument}
		}
	}
	return c, nil
}

// takers names the algorithms that take parameter p: "token-bucket".
func takers(p algorithm.Param) string {
	var names []string
	for _, s := range algorithm.All() {
		if s.Params&p != 0 {
			names = append(names, s.Name)
		}
	}
	if len(names) == 0 {
		return "no algorithm"
	}
	return strings.Join(names, ", ")
}

// shortDuration prints d without its zero minutes and seconds: "24h",
// "1h30m", "1ms".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// power prints v as 2^k when it is a power of two, else in decimal.
func power(v int64) string {
	if v > 0 && v&(v-1) == 0 {
		return fmt.Sprintf("2^%d", bits.TrailingZeros64(uint64(v)))
	}
	return fmt.Sprint(v)
}

// SameLimit reports whether c and d describe the same limit (the epoch
// aside, defaults filled in).
func (c Config) SameLimit(d Config) bool {
	if n, err := c.Normalize(); err == nil {
		c = n
	}
	if n, err := d.Normalize(); err == nil {
		d = n
	}
	c.Epoch, d.Epoch = 0, 0
	return c == d
}
