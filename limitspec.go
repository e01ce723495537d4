package redlimit

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseLimit reads one limit as the command line's --limit takes it:
// RATE/INTERVAL[,algorithm=A][,burst=N][,capacity=N], INTERVAL a Go
// duration ("10/1s", "1000/1h", "10/1s,algorithm=token-bucket,burst=20").
// The algorithm defaults to the sliding log. The config is normalized.
func ParseLimit(s string) (Config, error) {
	bad := func(reason string) (Config, error) {
		return Config{}, &ArgumentError{Arg: "limit", Value: s, Reason: reason, Kind: ErrInvalidArgument}
	}
	head, rest, _ := strings.Cut(s, ",")
	rate, interval, ok := strings.Cut(head, "/")
	if !ok {
		return bad("must be RATE/INTERVAL[,algorithm=A][,burst=N][,capacity=N], e.g. 10/1s")
	}
	var c Config
	var err error
	if c.Rate, err = strconv.ParseInt(strings.TrimSpace(rate), 10, 64); err != nil {
		return bad("the rate must be a whole number")
	}
	if c.Interval, err = time.ParseDuration(strings.TrimSpace(interval)); err != nil {
		return bad("the interval must be a Go duration (1s, 1m, 1h)")
	}
	seen := map[string]bool{}
	for opt := range strings.SplitSeq(rest, ",") {
		if rest == "" {
			break
		}
		k, v, ok := strings.Cut(strings.TrimSpace(opt), "=")
		if !ok || seen[k] {
			return bad(fmt.Sprintf("option %q must be given once, as key=value", opt))
		}
		seen[k] = true
		switch k {
		case "algorithm":
			if c.Algorithm, err = ParseAlgorithm(v); err != nil {
				return Config{}, err
			}
		case "burst", "capacity":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 1 {
				return bad(k + " must be a whole number of at least 1")
			}
			if k == "burst" {
				c.Burst = n
			} else {
				c.Capacity = n
			}
		default:
			return bad(fmt.Sprintf("unknown option %q (algorithm, burst, capacity)", k))
		}
	}
	return c.Normalize()
}

// LimitName is a limit's short name, as HTTP headers and the command line
// show it: "10/1s", "1000/1h", "10/1s,token-bucket,burst=20" (the algorithm
// when it is not the sliding log; burst and capacity when not the rate).
func LimitName(c Config) string {
	s := strconv.FormatInt(c.Rate, 10) + "/" + shortDuration(c.Interval)
	if c.Algorithm != "" && c.Algorithm != SlidingLog {
		s += "," + string(c.Algorithm)
	}
	if c.Burst != 0 && c.Burst != c.Rate {
		s += ",burst=" + strconv.FormatInt(c.Burst, 10)
	}
	if c.Capacity != 0 && c.Capacity != c.Rate {
		s += ",capacity=" + strconv.FormatInt(c.Capacity, 10)
	}
	return s
}
