package simulate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// Traffic names a pattern of request arrivals. Every pattern is scaled to
// the limit (its rate and interval), so that the same name stresses any
// limit the same way.
type Traffic string

const (
	// Steady: evenly spaced arrivals at 2 x the rate, from the start.
	Steady Traffic = "steady"
	// Bursty: quiet spells of 1/2 to 2 intervals, each followed by a burst
	// of 1/2 to 1 interval at 3 x the rate, at random times (the seed picks
	// them). Bursts land anywhere against the clock's window grid.
	Bursty Traffic = "bursty"
	// Ramp: the arrival rate climbs linearly from 0 to 4 x the rate over
	// the duration.
	Ramp Traffic = "ramp"
	// OnOff: alternating intervals (seconds at the default 1s) of arrivals
	// at 4 x the rate and of silence, after half an interval of silence: so
	// each "on" interval straddles a boundary of the clock's window grid, as
	// traffic that knows nothing of the grid does. Options.Offset moves it.
	OnOff Traffic = "on-off"
)

// Traffics lists the patterns, the default first.
var Traffics = []Traffic{Steady, Bursty, Ramp, OnOff}

// ParseTraffic reads a pattern's name.
func ParseTraffic(s string) (Traffic, error) {
	for _, t := range Traffics {
		if string(t) == strings.ToLower(s) {
			return t, nil
		}
	}
	return "", fmt.Errorf("unknown traffic %q: one of %v", s, Traffics)
}

// errTooMany stops a pattern that would make more than MaxRequests.
type errTooMany struct{ max int }

func (e errTooMany) Error() string {
	return fmt.Sprintf("more than %d requests: lower the rate or the duration", e.max)
}

// arrivals returns the instants, since the start and in whole milliseconds
// (the stores' resolution), at which requests arrive: non-decreasing, all
// before duration. Only Bursty uses the seed.
func arrivals(t Traffic, rate int64, interval, duration time.Duration, seed uint64) ([]time.Duration, error) {
	iv := float64(interval.Milliseconds())
	durMS := duration.Milliseconds()
	var out []time.Duration
	add := func(ms float64) (bool, error) {
		at := int64(math.Floor(ms))
		if at >= durMS {
			return false, nil
		}
		if len(out) == MaxRequests {
			return false, errTooMany{MaxRequests}
		}
		out = append(out, time.Duration(at)*time.Millisecond)
		return true, nil
	}
	// run adds arrivals every iv/perInterval ms over [from, to).
	run := func(from, to, perInterval float64) error {
		space := iv / perInterval
		for k := 0.0; ; k++ {
			at := from + k*space
			if at >= to {
				return nil
			}
			if more, err := add(at); err != nil || !more {
				return err
			}
		}
	}
	r := float64(rate)
	var err error
	switch t {
	case Steady:
		err = run(0, float64(durMS), 2*r)
	case Bursty:
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		for at := 0.0; at < float64(durMS) && err == nil; {
			// Whole milliseconds, at least one, so that tiny intervals progress.
			at += max(1, math.Floor(iv/2+rng.Float64()*1.5*iv)) // quiet: 1/2 to 2 intervals
			length := max(1, math.Floor(iv/2+rng.Float64()*iv/2))
			err = run(at, at+length, 3*r)
			at += length
		}
	case Ramp:
		// The rate at s ms is 4r/iv * s/D arrivals per ms, so k arrivals are
		// due by s = sqrt(k * D * iv / (2r)); arrival k comes when k-1/2 are.
		for k := 0.5; ; k++ {
			more, e := add(math.Sqrt(k * float64(durMS) * iv / (2 * r)))
			if e != nil || !more {
				err = e
				break
			}
		}
	case OnOff:
		for at := iv / 2; at < float64(durMS) && err == nil; at += 2 * iv {
			err = run(at, at+iv, 4*r)
		}
	default:
		return nil, fmt.Errorf("unknown traffic %q: one of %v", t, Traffics)
	}
	return out, err
}
