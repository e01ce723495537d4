package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redlimit/redlimit"
)

// errorf prints a message for cmd on stderr and returns exitError.
func (c *cli) errorf(cmd *command, format string, args ...any) int {
	fmt.Fprintf(c.stderr, "redlimit %s: %s\n", cmd.name, fmt.Sprintf(format, args...))
	return exitError
}

// fail prints err for cmd on stderr and returns exitError. Library errors
// are descriptive already; only their "redlimit: " is dropped.
func (c *cli) fail(cmd *command, err error) int {
	msg := strings.TrimPrefix(err.Error(), "redlimit: ")
	switch {
	case errors.Is(err, context.Canceled):
		msg = "interrupted: " + msg
	case c.redis != nil && isTimeout(err):
		hint := ""
		if strings.HasPrefix(c.redis.redisURL, "rediss") {
			hint = " (the URL asks for TLS, rediss://: does the server speak TLS on that port?)"
		}
		msg = fmt.Sprintf("no answer from Redis within --timeout %s%s: %s", c.redis.timeout, hint, msg)
	}
	return c.errorf(cmd, "%s", msg)
}

// configJSON is a config in JSON output. Burst and capacity appear with
// the algorithms they belong to.
type configJSON struct {
	Algorithm  string `json:"algorithm"`
	Mode       string `json:"mode"`
	Rate       int64  `json:"rate"`
	Interval   string `json:"interval"`
	IntervalMS int64  `json:"interval_ms"`
	Burst      int64  `json:"burst,omitempty"`
	Capacity   int64  `json:"capacity,omitempty"`
}

func toJSON(cfg redlimit.Config) configJSON {
	alg := cfg.Algorithm
	if alg == "" {
		alg = redlimit.SlidingLog
	}
	return configJSON{Algorithm: string(alg), Mode: cfg.Mode.String(), Rate: cfg.Rate, Interval: cfg.Interval.String(), IntervalMS: cfg.Interval.Milliseconds(),
		Burst: cfg.Burst, Capacity: cfg.Capacity}
}

// printJSON writes v as one line of JSON on stdout.
func (c *cli) printJSON(cmd *command, v any) int {
	if err := json.NewEncoder(c.stdout).Encode(v); err != nil {
		return c.fail(cmd, err)
	}
	return exitOK
}

func plural(n int64, word string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// shown is d as a person reads it in an answer: to the millisecond (a
// store's clock makes "991.278ms" of a second's wait), to the microsecond
// below one. --json keeps every digit.
func shown(d time.Duration) time.Duration {
	if d >= time.Millisecond || d <= -time.Millisecond {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Microsecond)
}

// isTimeout reports whether err is a deadline or a network timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// note prints a note for cmd on stderr: what the output does not say but
// the user would want to know.
func (c *cli) note(cmd *command, format string, args ...any) {
	fmt.Fprintf(c.stderr, "redlimit %s: note: %s\n", cmd.name, fmt.Sprintf(format, args...))
}

// noteMemory says, on a memory store made for this run, that it lives for
// this one command: a limiter set by an earlier run is not in it, and what
// this one stores is gone when it ends.
func (c *cli) noteMemory(cmd *command) {
	if c.freshMemory {
		c.note(cmd, "without --redis the limiter lives in memory for this one command only: "+
			"no earlier run's state is here and none is kept (give --redis URL or $REDIS_URL to share it)")
	}
}

// noteFreshClient says that a per-client limiter was used as a fresh client,
// named by the ID it was given.
func (c *cli) noteFreshClient(cmd *command, name, id string) {
	c.note(cmd, "%q is per-client and no --client was given: used a fresh client ID, %q (pass --client ID to be the same client again)", name, id)
}
