// Package ratelimitheader writes the rate-limit response fields of
// draft-ietf-httpapi-ratelimit-headers-11 (RateLimit-Policy, RateLimit),
// the legacy X-RateLimit-* fields and Retry-After.
//
// It is the only place that knows the draft's syntax: the draft may still
// change, and a new revision should touch this package alone. Values are
// rounded so that a client reading them never asks too early nor expects
// more than it has: times in whole seconds rounded up, remaining quota
// rounded down (it is already whole), negative values clamped to zero.
package ratelimitheader

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The field names.
const (
	PolicyField     = "RateLimit-Policy"
	RateLimitField  = "RateLimit"
	RetryAfterField = "Retry-After"
	LegacyLimit     = "X-RateLimit-Limit"
	LegacyRemaining = "X-RateLimit-Remaining"
	LegacyReset     = "X-RateLimit-Reset"
)

// QuotaExceededType is the draft's problem type (RFC 9457) for a request
// refused because it exceeds one or more quota policies; its extension
// member "violated-policies" lists their names.
const QuotaExceededType = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// Quota is one quota policy as the fields show it.
type Quota struct {
	// Name identifies the policy in both fields (a structured-field
	// String: printable ASCII, other bytes are replaced by '?').
	Name string
	// Quota is the policy's quota (q), in requests.
	Quota int64
	// Window is the policy's time window (w).
	Window time.Duration
	// Remaining is the quota left (r).
	Remaining int64
	// Reset is how long until more quota is available (t).
	Reset time.Duration
	// PartitionKey, when not nil, is sent as the pk parameter: an opaque
	// identifier of the partition (the key) the request was counted in.
	PartitionKey []byte
}

// maxInteger is the largest structured-field Integer (RFC 9651 3.3.1).
const maxInteger = 999_999_999_999_999

// Seconds returns d in whole seconds rounded up, clamped to 0..maxInteger:
// the delay-seconds of Retry-After and t, never earlier than d.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return min(s, maxInteger)
}

func integer(n int64) string {
	return strconv.FormatInt(max(0, min(n, maxInteger)), 10)
}

// String serializes s as a structured-field String.
func String(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func item(b *strings.Builder, q *Quota) {
	if b.Len() > 0 {
		b.WriteString(", ")
	}
	b.WriteString(String(q.Name))
}

func pk(b *strings.Builder, q *Quota) {
	if q.PartitionKey != nil {
		b.WriteString(";pk=:")
		b.WriteString(base64.StdEncoding.EncodeToString(q.PartitionKey))
		b.WriteByte(':')
	}
}

// PolicyValue returns the RateLimit-Policy field value for qs:
// `"name";q=100;w=60` per quota, the window at least one second (a window
// rounded up understates the rate, never overstates it).
func PolicyValue(qs []Quota) string {
	var b strings.Builder
	for i := range qs {
		q := &qs[i]
		item(&b, q)
		b.WriteString(";q=")
		b.WriteString(integer(q.Quota))
		b.WriteString(";w=")
		b.WriteString(integer(max(1, Seconds(q.Window))))
		pk(&b, q)
	}
	return b.String()
}

// RateLimitValue returns the RateLimit field value for qs:
// `"name";r=50;t=30` per quota.
func RateLimitValue(qs []Quota) string {
	var b strings.Builder
	for i := range qs {
		q := &qs[i]
		item(&b, q)
		b.WriteString(";r=")
		b.WriteString(integer(q.Remaining))
		b.WriteString(";t=")
		b.WriteString(integer(Seconds(q.Reset)))
		pk(&b, q)
	}
	return b.String()
}

// Set writes RateLimit-Policy and RateLimit for qs (nothing if qs is empty).
func Set(h http.Header, qs []Quota) {
	if len(qs) == 0 {
		return
	}
	h.Set(PolicyField, PolicyValue(qs))
	h.Set(RateLimitField, RateLimitValue(qs))
}

// SetLegacy writes X-RateLimit-Limit, -Remaining and -Reset (seconds from
// now, rounded up) for the quota closest to refusing: the least remaining,
// the latest reset among equals. Nothing if qs is empty.
func SetLegacy(h http.Header, qs []Quota) {
	if len(qs) == 0 {
		return
	}
	m := &qs[0]
	for i := range qs[1:] {
		q := &qs[i+1]
		if q.Remaining < m.Remaining || q.Remaining == m.Remaining && q.Reset > m.Reset {
			m = q
		}
	}
	h.Set(LegacyLimit, integer(m.Quota))
	h.Set(LegacyRemaining, integer(m.Remaining))
	h.Set(LegacyReset, integer(Seconds(m.Reset)))
}

// SetRetryAfter writes Retry-After for a refusal that could be granted
// after d: whole seconds rounded up, at least 1 (a refusal never invites
// an immediate retry).
func SetRetryAfter(h http.Header, d time.Duration) {
	h.Set(RetryAfterField, integer(max(1, Seconds(d))))
}
