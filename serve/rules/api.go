package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
)

// Spec is a rule given other than by a file (the service's API): the
// limits of one descriptor path, checked as a file's are.
type Spec struct {
	// Limits are applied together. One limit is a file's rate_limit (its
	// Name is the rule's), several are a file's limits.
	Limits []LimitSpec `json:"limits,omitempty"`
	// Unlimited: never limited; takes no Limits.
	Unlimited bool `json:"unlimited,omitempty"`
	// ShadowMode: counted, never refused.
	ShadowMode bool `json:"shadow_mode,omitempty"`
}

// LimitSpec is one limit of a Spec, in redlimit's words.
type LimitSpec struct {
	// Algorithm is a redlimit algorithm's name; default fixed-window.
	Algorithm string `json:"algorithm,omitempty"`
	// Rate requests per Interval; 0 (one limit only) refuses everything.
	Rate *int64 `json:"rate"`
	// Interval is a Go duration: "1s", "1500ms", "2h".
	Interval string `json:"interval"`
	Burst    int64  `json:"burst,omitempty"`
	Capacity int64  `json:"capacity,omitempty"`
	Name     string `json:"name,omitempty"`
}

// apiFields turns the file's field names in a compiler error into the
// Spec's JSON names.
var apiFields = strings.NewReplacer(".requests_per_unit", ".rate", ".unit_multiplier", ".interval", ".unit", ".interval")

// Compile checks spec as a file's descriptor at domain and path is
// checked and returns its rule, marked API. A mistake is an *Error whose
// Field is the Spec's JSON path ("limits[0].rate").
func Compile(domain, path string, spec Spec) (*Rule, error) {
	const file = "(api)"
	if domain == "" {
		return nil, &Error{File: file, Field: "domain", Reason: "must not be empty"}
	}
	if strings.IndexByte(domain, 0) >= 0 {
		// NUL separates the domain from the path in the service's store.
		return nil, &Error{File: file, Field: "domain", Reason: "must not hold a NUL byte"}
	}
	if len(domain) > MaxAPIDomain {
		return nil, &Error{File: file, Field: "domain", Reason: fmt.Sprintf("is %d bytes, at most %d allowed", len(domain), MaxAPIDomain)}
	}
	if _, err := ParsePath(path); err != nil {
		return nil, err
	}
	d := &Domain{Name: domain, File: file}
	c := compiler{d: d}
	r := &Rule{Domain: domain, Path: path, ShadowMode: spec.ShadowMode, API: true}
	fail := func(err error) (*Rule, error) {
		if e, ok := err.(*Error); ok {
			e.Field = apiFields.Replace(e.Field)
		}
		return nil, err
	}
	switch {
	case spec.Unlimited && len(spec.Limits) > 0:
		return nil, &Error{File: file, Field: "limits", Reason: "an unlimited rule takes no limits"}
	case spec.Unlimited:
		r.Unlimited = true
		return r, nil
	case len(spec.Limits) == 0:
		return nil, &Error{File: file, Field: "limits", Reason: "missing: give at least one limit, or unlimited: true"}
	case len(spec.Limits) > maxAPILimits:
		return nil, &Error{File: file, Field: "limits", Reason: fmt.Sprintf("has %d limits, at most %d allowed", len(spec.Limits), maxAPILimits)}
	}
	single := len(spec.Limits) == 1
	for i, l := range spec.Limits {
		field := fmt.Sprintf("limits[%d]", i)
		if l.Interval == "" {
			return nil, &Error{File: file, Field: field + ".interval", Reason: "missing: give a Go duration (1s, 1500ms, 2h)"}
		}
		if l.Rate == nil {
			return nil, &Error{File: file, Field: field + ".rate", Reason: "missing"}
		}
		ly := limitYAML{RequestsPerUnit: l.Rate, Interval: l.Interval, Algorithm: l.Algorithm, Burst: l.Burst, Capacity: l.Capacity, Name: l.Name}
		if err := c.limit(r, &ly, nil, field, single); err != nil {
			return fail(err)
		}
	}
	return r, nil
}

// MaxAPIDomain bounds the domain of a rule Compile makes, so that the
// names the service gives its rules' policies stay within redlimit's
// bound with the longest path.
const MaxAPIDomain = 100

// maxAPILimits is redlimit.MaxLimits, the most one policy holds.
const maxAPILimits = 16

// ParsePath splits a rule's Path ("key=value/key2") into its entries,
// unescaping each key and value. A path a file could not give (empty, an
// empty key, a bad escape, too deep or too long) is an *Error.
func ParsePath(path string) ([]Entry, error) {
	const file = "(api)"
	if path == "" {
		return nil, &Error{File: file, Field: "path", Reason: "must not be empty"}
	}
	if len(path) > 900 {
		return nil, &Error{File: file, Field: "path", Reason: fmt.Sprintf("is %d bytes, at most 900 allowed", len(path))}
	}
	segs := strings.Split(path, "/")
	if len(segs) > maxDepth {
		return nil, &Error{File: file, Field: "path", Reason: fmt.Sprintf("has %d levels, at most %d allowed", len(segs), maxDepth)}
	}
	out := make([]Entry, len(segs))
	for i, s := range segs {
		k, v, hasValue := strings.Cut(s, "=")
		key, err1 := unescape(k)
		value, err2 := unescape(v)
		switch {
		case err1 != nil || err2 != nil:
			return nil, &Error{File: file, Field: "path", Reason: fmt.Sprintf("segment %q: a bad %%XX escape", s)}
		case key == "":
			return nil, &Error{File: file, Field: "path", Reason: fmt.Sprintf("segment %d has an empty key", i)}
		case hasValue && value == "":
			return nil, &Error{File: file, Field: "path", Reason: fmt.Sprintf("segment %q: an empty value; write the key alone", s)}
		}
		out[i] = Entry{Key: key, Value: value}
	}
	if p := PathOf(out); p != path {
		return nil, &Error{File: file, Field: "path", Reason: fmt.Sprintf("is not in canonical form; write %q", p)}
	}
	return out, nil
}

// PathOf is the Path of a descriptor of entries: "key=value/key2".
func PathOf(entries []Entry) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('/')
		}
		b.WriteString(escape(e.Key))
		if e.Value != "" {
			b.WriteByte('=')
			b.WriteString(escape(e.Value))
		}
	}
	return b.String()
}

func unescape(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	return url.PathUnescape(s)
}

// With returns a Set holding s's rules and extra: each rule of extra
// takes the place of s's rule of the same Domain and Path, or is added
// (a domain s lacks is added too; its File is "(api)"). version
// identifies extra: the new Set's Digest combines it with s's (s's own
// when extra is empty). s is not changed. A rule of extra with a bad
// Path is an *Error.
func (s *Set) With(extra []*Rule, version string) (*Set, error) {
	if len(extra) == 0 {
		return s, nil
	}
	out := &Set{domains: make(map[string]*Domain, len(s.domains)), Files: s.Files}
	for n, d := range s.domains {
		out.domains[n] = d
	}
	copied := map[string]bool{}
	for _, r := range extra {
		entries, err := ParsePath(r.Path)
		if err != nil {
			return nil, err
		}
		d := out.domains[r.Domain]
		if !copied[r.Domain] {
			nd := &Domain{Name: r.Domain, File: "(api)"}
			if d != nil {
				nd.File, nd.root, nd.Rules = d.File, d.root, d.Rules
			}
			nd.Rules = append([]*Rule(nil), nd.Rules...)
			d = nd
			out.domains[r.Domain] = d
			copied[r.Domain] = true
		}
		d.root = *put(&d.root, entries, r)
		replaced := false
		for i, old := range d.Rules {
			if old.Path == r.Path {
				d.Rules[i], replaced = r, true
				break
			}
		}
		if !replaced {
			d.Rules = append(d.Rules, r)
		}
	}
	h := sha256.Sum256([]byte(s.Digest + "\x00" + version))
	out.Digest = hex.EncodeToString(h[:])
	return out, nil
}

// put returns a copy of n with r at the end of entries' path, the nodes
// on the way copied (n and its other children are shared, not changed).
func put(n *node, entries []Entry, r *Rule) *node {
	c := *n
	c.exact = make(map[string]*node, len(n.exact)+1)
	for k, v := range n.exact {
		c.exact[k] = v
	}
	e := entries[0]
	id := e.Key
	if e.Value != "" {
		id += "\x00" + e.Value
	}
	child := n.exact[id]
	if child == nil {
		child = &node{pattern: e.Value}
	}
	var next *node
	if len(entries) == 1 {
		cp := *child
		cp.rule = r
		next = &cp
	} else {
		next = put(child, entries[1:], r)
	}
	c.exact[id] = next
	c.wild = append([]wildcard(nil), n.wild...)
	found := false
	for i := range c.wild {
		if c.wild[i].n == child {
			c.wild[i].n, found = next, true
		}
	}
	if !found && strings.Contains(e.Value, "*") {
		c.wild = append(c.wild, wildcard{key: e.Key, parts: strings.Split(e.Value, "*"), n: next})
	}
	return &c
}
