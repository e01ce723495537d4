// Package rules reads rate-limit rules files: envoyproxy/ratelimit's YAML
// format as is (domain, nested descriptors of key and optional value, a
// value holding "*" matching any run of characters there (share_threshold
// making all the values it matches share one count), rate_limit with unit,
// unit_multiplier, requests_per_unit, unlimited, name and replaces,
// shadow_mode, quota_mode, detailed_metric, value_to_metric, metadata),
// so that a user of that service can point
// redlimit at the same files, plus redlimit's extensions in the same
// file:
//
//	rate_limit:
//	  requests_per_unit: 10
//	  unit: second          # or interval: 1500ms (any Go duration)
//	  algorithm: token-bucket
//	  burst: 50             # token-bucket; capacity: for leaky-bucket
//	limits:                 # several limits on one descriptor, all applied
//	  - {requests_per_unit: 10, unit: second}
//	  - {requests_per_unit: 1000, unit: hour, algorithm: sliding-log}
//
// A limit without an algorithm is a fixed window aligned to the clock, as
// envoyproxy/ratelimit counts, so that a moved-over file decides as it
// did. Files are decoded strictly: an unknown field, a wrong type or a bad
// value is an *Error naming the file, line and field.
package rules

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redlimit/redlimit"
)

// ErrInvalid is matched (errors.Is) by every error about a rules file's
// content. Such an error is also a redlimit.ErrInvalidArgument.
var ErrInvalid = errors.New("rules: invalid rules")

// Error is a mistake in a rules file.
type Error struct {
	// File is the file's name as given to Parse or found by Load.
	File string
	// Line is the 1-based line of the mistake, 0 when unknown.
	Line int
	// Field is the YAML path of the field at fault, e.g.
	// "descriptors[0].rate_limit.unit"; empty for the file as a whole.
	Field string
	// Reason says what is wrong and what is expected.
	Reason string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Reason)
	return b.String()
}

// Is matches ErrInvalid and redlimit.ErrInvalidArgument.
func (e *Error) Is(target error) bool {
	return target == ErrInvalid || target == redlimit.ErrInvalidArgument
}

// Unit is a unit of time of envoyproxy/ratelimit's format. Month and year
// are 30 and 365 days, as that service counts them.
type Unit string

// The units, as written in a file (case-insensitive there).
const (
	Second Unit = "second"
	Minute Unit = "minute"
	Hour   Unit = "hour"
	Day    Unit = "day"
	Week   Unit = "week"
	Month  Unit = "month"
	Year   Unit = "year"
)

// units in order from the longest, for Unit.Of.
var units = []struct {
	u Unit
	d time.Duration
}{
	{Year, 365 * 24 * time.Hour},
	{Month, 30 * 24 * time.Hour},
	{Week, 7 * 24 * time.Hour},
	{Day, 24 * time.Hour},
	{Hour, time.Hour},
	{Minute, time.Minute},
	{Second, time.Second},
}

// Duration returns the unit's length (0 for an unknown unit).
func (u Unit) Duration() time.Duration {
	for _, x := range units {
		if x.u == u {
			return x.d
		}
	}
	return 0
}

// UnitOf expresses an interval as a multiple of the longest unit that
// divides it: 2h is (Hour, 2). An interval of no whole seconds gives
// ("", 0).
func UnitOf(d time.Duration) (Unit, int64) {
	for _, x := range units {
		if d >= x.d && d%x.d == 0 {
			return x.u, int64(d / x.d)
		}
	}
	return "", 0
}

// Limit is one limit of a rule.
type Limit struct {
	// Name is an item of limits' name (a rate_limit's is Rule.Name): what
	// replaces refers to, and what responses show; may be empty.
	Name string
	// Config is the limit, normalized (redlimit.Config.Normalize).
	Config redlimit.Config
}

// Rule is what a descriptor of a rules file says about the requests it
// matches.
type Rule struct {
	// Domain is the rules' domain.
	Domain string
	// Path is the rule's place in the domain's tree, unique within it:
	// "key=value/key2" (a key without a value matches each value apart).
	Path string
	// Name is rate_limit.name (limits' items have their own Limit.Name).
	Name string
	// Limits are applied together: a request is granted only if every
	// one grants it. Empty when Unlimited or Blocked.
	Limits []Limit
	// Unlimited: the descriptor is never limited (rate_limit.unlimited).
	Unlimited bool
	// Blocked: requests_per_unit 0, every request is over the limit and
	// nothing is counted.
	Blocked bool
	// BlockedInterval is the interval a Blocked rule's file gave, for
	// responses.
	BlockedInterval time.Duration
	// ShadowMode: the limit counts, but a request over it is answered OK.
	ShadowMode bool
	// QuotaMode: a descriptor over this limit makes the request over the
	// limit only if every quota-mode descriptor of the request is over
	// (envoyproxy/ratelimit's quota_mode).
	QuotaMode bool
	// Replaces names the limits (Limit.Name) this rule cancels when both
	// match descriptors of one request.
	Replaces []string
	// DetailedMetric is kept from the file for the metrics to come.
	DetailedMetric bool
	// File and Line say where the rule was written.
	File string
	Line int
	// API: the rule was set through the service's API (Compile), not
	// read from a file; File and Line are then empty.
	API bool
}

// Names returns the names of the rule's limits that are not empty.
func (r *Rule) Names() []string {
	var out []string
	if r.Name != "" {
		out = append(out, r.Name)
	}
	for _, l := range r.Limits {
		if l.Name != "" {
			out = append(out, l.Name)
		}
	}
	return out
}

// ID names the rule across domains: the domain (escaped as Path's
// segments are) and the Path, "domain/key=value/key2". The service
// names the rule's redlimit.Policy after it.
func (r *Rule) ID() string { return escape(r.Domain) + "/" + r.Path }

// Escape escapes '%', '/' and '=' as %XX, as Path's segments are: joined
// with '/', escaped strings stay apart.
func Escape(s string) string { return escape(s) }

// String prints the rule as "domain key=value/key2".
func (r *Rule) String() string { return r.Domain + " " + r.Path }

// Entry is one key/value pair of a request's descriptor.
type Entry struct {
	Key, Value string
}
