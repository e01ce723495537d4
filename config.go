package redlimit

import (
	"fmt"
	"strings"
	"time"
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

// SlidingLog grants at most Rate permits in any window of Interval: a grant
// returns to the pool Interval after it was made (Redisson's semantics).
const SlidingLog Algorithm = "sliding-log"

// Limits on a Config, chosen so that every value stays exact as a Lua number
// (2^53) and in milliseconds since the epoch.
const (
	MaxRate     int64         = 1 << 40
	MinInterval time.Duration = time.Millisecond
	MaxInterval time.Duration = 100 * 365 * 24 * time.Hour
)

// Config is a limiter's configuration. It is stored with the limiter, so a
// change reaches every client.
type Config struct {
	// Algorithm defaults to SlidingLog when empty.
	Algorithm Algorithm
	// Mode: Overall (the zero value) or PerClient.
	Mode Mode
	// Rate is the number of permits per Interval, 1..MaxRate.
	Rate int64
	// Interval is a whole number of milliseconds, MinInterval..MaxInterval.
	Interval time.Duration
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

// String prints the config the way the command line reads it, e.g.
// "10 per 1s (sliding-log, overall)".
func (c Config) String() string {
	alg := c.Algorithm
	if alg == "" {
		alg = SlidingLog
	}
	return fmt.Sprintf("%d per %s (%s, %s)", c.Rate, c.Interval, alg, c.Mode)
}

// Normalize fills the defaults and checks every field, returning an
// *ArgumentError (errors.Is ErrInvalidArgument) for the first bad one.
func (c Config) Normalize() (Config, error) {
	if c.Algorithm == "" {
		c.Algorithm = SlidingLog
	}
	if c.Algorithm != SlidingLog {
		return c, &ArgumentError{Arg: "algorithm", Value: string(c.Algorithm), Reason: "unknown algorithm", Kind: ErrInvalidArgument}
	}
	if c.Mode != Overall && c.Mode != PerClient {
		return c, &ArgumentError{Arg: "mode", Value: c.Mode.String(), Reason: "unknown mode", Kind: ErrInvalidArgument}
	}
	if c.Rate <= 0 || c.Rate > MaxRate {
		return c, &ArgumentError{Arg: "rate", Value: fmt.Sprint(c.Rate), Reason: fmt.Sprintf("must be 1..%d", MaxRate), Kind: ErrInvalidArgument}
	}
	switch {
	case c.Interval < MinInterval:
		return c, &ArgumentError{Arg: "interval", Value: c.Interval.String(), Reason: "must be at least 1ms", Kind: ErrInvalidArgument}
	case c.Interval > MaxInterval:
		return c, &ArgumentError{Arg: "interval", Value: c.Interval.String(), Reason: "must be at most " + MaxInterval.String(), Kind: ErrInvalidArgument}
	case c.Interval%time.Millisecond != 0:
		return c, &ArgumentError{Arg: "interval", Value: c.Interval.String(), Reason: "must be a whole number of milliseconds", Kind: ErrInvalidArgument}
	}
	return c, nil
}

// SameLimit reports whether c and d describe the same limit (the epoch aside).
func (c Config) SameLimit(d Config) bool {
	c.Epoch, d.Epoch = 0, 0
	if c.Algorithm == "" {
		c.Algorithm = SlidingLog
	}
	if d.Algorithm == "" {
		d.Algorithm = SlidingLog
	}
	return c == d
}
