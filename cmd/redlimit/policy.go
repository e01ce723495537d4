package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redlimit/redlimit"
)

// limitSyntax is the form of one --limit, for help and errors.
const limitSyntax = "RATE/INTERVAL[,algorithm=A][,burst=N][,capacity=N]"

// limitList is --limit: one limit of a policy each time it is given.
type limitList []string

func (l *limitList) String() string     { return strings.Join(*l, " ") }
func (l *limitList) Set(v string) error { *l = append(*l, v); return nil }

// limitFlagHelp is the help of --limit.
const limitFlagHelp = "one `limit` of a keyed policy, " + limitSyntax + " (10/1s, 1000/1h, 10/1s,algorithm=token-bucket,burst=20); repeatable: a request needs every limit's grant"

// parseLimits reads the --limit values, each by redlimit.ParseLimit. A
// limit that names no algorithm takes alg (--algorithm) when it was given.
func parseLimits(specs []string, alg string, algGiven bool) ([]redlimit.Config, error) {
	out := make([]redlimit.Config, 0, len(specs))
	for _, spec := range specs {
		s := spec
		if algGiven && !namesAlgorithm(s) {
			s += ",algorithm=" + alg
		}
		c, err := redlimit.ParseLimit(s)
		var ae *redlimit.ArgumentError
		if errors.As(err, &ae) && ae.Arg != "limit" {
			// Which of the limits it is: "invalid burst" alone does not say.
			return nil, &limitError{spec: spec, err: err}
		}
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return redlimit.NormalizePolicy(out)
}

// limitError names the --limit a library error is about.
type limitError struct {
	spec string
	err  error
}

func (e *limitError) Error() string {
	return fmt.Sprintf("--limit %s: %s", e.spec, strings.TrimPrefix(e.err.Error(), "redlimit: "))
}

func (e *limitError) Unwrap() error { return e.err }

// namesAlgorithm reports whether a --limit value has an algorithm= option.
func namesAlgorithm(spec string) bool {
	_, opts, _ := strings.Cut(spec, ",")
	for opt := range strings.SplitSeq(opts, ",") {
		if k, _, _ := strings.Cut(strings.TrimSpace(opt), "="); k == "algorithm" {
			return true
		}
	}
	return false
}

// errNoPolicies: the store keeps no keyed policies.
var errNoPolicies = fmt.Errorf("this store keeps no keyed policies (--limit, --key): %w", errors.ErrUnsupported)

// policyStore returns store as a PolicyStore, or errNoPolicies.
func policyStore(store redlimit.Store) (redlimit.PolicyStore, error) {
	ps, ok := store.(redlimit.PolicyStore)
	if !ok {
		return nil, errNoPolicies
	}
	return ps, nil
}

// openPolicy opens, for cmd, the store sf names and the policy name on it,
// as openLimiter opens a limiter; limits, when not nil, are sent with every
// call (the policy is stored with them where there is none).
func (c *cli) openPolicy(ctx context.Context, cmd *command, sf *storeFlags, name string, extra time.Duration, limits []redlimit.Config) (bounded context.Context, p *redlimit.Policy, done func(), err error) {
	bounded, store, done, err := c.openBounded(ctx, sf, extra)
	if err != nil {
		return nil, nil, nil, err
	}
	ps, err := policyStore(store)
	if err == nil {
		p, err = redlimit.NewPolicy(ps, name, limits, redlimit.WithClock(c.clock()))
	}
	if err != nil {
		done()
		return nil, nil, nil, err
	}
	c.noteMemory(cmd)
	return bounded, p, done, nil
}

// limitNames is a policy's limits as --limit takes them, "10/1s and 1000/1h".
func limitNames(limits []redlimit.Config) string {
	return strings.Join(limitStrings(limits), " and ")
}

// limitStrings is each limit as --limit takes it.
func limitStrings(limits []redlimit.Config) []string {
	names := make([]string, len(limits))
	for i, l := range limits {
		names[i] = redlimit.LimitName(l)
	}
	return names
}

// notPolicy is the error for a policy that is not stored.
func (c *cli) notPolicy(cmd *command, name, orPass string) int {
	return c.errorf(cmd, "policy %q not initialized: run set-rate %s --limit %s first%s", name, name, limitSyntax, orPass)
}

// limitJSON is one limit of a policy in JSON output: its --limit form and
// its parts (burst and capacity with the algorithms they belong to).
type limitJSON struct {
	Limit      string `json:"limit"`
	Algorithm  string `json:"algorithm"`
	Rate       int64  `json:"rate"`
	Interval   string `json:"interval"`
	IntervalMS int64  `json:"interval_ms"`
	Burst      int64  `json:"burst,omitempty"`
	Capacity   int64  `json:"capacity,omitempty"`
}

func toLimitJSON(c redlimit.Config) limitJSON {
	j := toJSON(c)
	return limitJSON{Limit: redlimit.LimitName(c), Algorithm: j.Algorithm, Rate: j.Rate, Interval: j.Interval, IntervalMS: j.IntervalMS, Burst: j.Burst, Capacity: j.Capacity}
}

func limitsJSON(limits []redlimit.Config) []limitJSON {
	out := make([]limitJSON, len(limits))
	for i, l := range limits {
		out[i] = toLimitJSON(l)
	}
	return out
}

// limitStatusJSON is one limit's state for a key.
type limitStatusJSON struct {
	limitJSON
	Remaining    int64 `json:"remaining"`
	ResetAfterMS int64 `json:"reset_after_ms"`
	RetryAfterMS int64 `json:"retry_after_ms"`
	Refused      bool  `json:"refused,omitempty"`
}

func statusJSON(limits []redlimit.LimitStatus) []limitStatusJSON {
	out := make([]limitStatusJSON, len(limits))
	for i, l := range limits {
		out[i] = limitStatusJSON{limitJSON: toLimitJSON(l.Config), Remaining: l.Remaining,
			ResetAfterMS: l.ResetAfter.Milliseconds(), RetryAfterMS: l.RetryAfter.Milliseconds(), Refused: l.Refused}
	}
	return out
}

// printLimits prints a policy's limits under label, one a line, with what
// after each: "policy:    10/1s    9 remaining, ...".
func (c *cli) printLimits(label string, names []string, after []string) {
	width := 0
	for _, n := range names {
		width = max(width, len(n))
	}
	for i, n := range names {
		line := n
		if after != nil {
			line = fmt.Sprintf("%-*s  %s", width, n, after[i])
		}
		fmt.Fprintf(c.stdout, "%-11s%s\n", label, line)
		label = ""
	}
}

// printStatus prints a key's state on every limit of its policy.
func (c *cli) printStatus(limits []redlimit.LimitStatus) {
	names := make([]string, len(limits))
	after := make([]string, len(limits))
	for i, l := range limits {
		names[i] = l.Name
		after[i] = fmt.Sprintf("%d remaining, reset after %s", l.Remaining, shown(l.ResetAfter))
		if l.RetryAfter > 0 {
			after[i] += fmt.Sprintf(", retry after %s", shown(l.RetryAfter))
		}
		if l.Refused {
			after[i] += " (refused)"
		}
	}
	c.printLimits("policy:", names, after)
}
