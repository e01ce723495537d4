package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redlimit/redlimit"
	"gopkg.in/yaml.v3"
)

// The file as YAML: envoyproxy/ratelimit's fields plus redlimit's.
type fileYAML struct {
	Domain      string     `yaml:"domain"`
	Descriptors []descYAML `yaml:"descriptors"`
}

type descYAML struct {
	Key            string      `yaml:"key"`
	Value          string      `yaml:"value"`
	RateLimit      *limitYAML  `yaml:"rate_limit"`
	Limits         []limitYAML `yaml:"limits"`
	Descriptors    []descYAML  `yaml:"descriptors"`
	ShadowMode     bool        `yaml:"shadow_mode"`
	DetailedMetric bool        `yaml:"detailed_metric"`
	ValueToMetric  bool        `yaml:"value_to_metric"`
	QuotaMode      bool        `yaml:"quota_mode"`
	ShareThreshold bool        `yaml:"share_threshold"`
	Metadata       yaml.Node   `yaml:"metadata"`
}

type limitYAML struct {
	RequestsPerUnit *int64         `yaml:"requests_per_unit"`
	Unit            string         `yaml:"unit"`
	UnitMultiplier  *int64         `yaml:"unit_multiplier"`
	Unlimited       bool           `yaml:"unlimited"`
	Name            string         `yaml:"name"`
	Replaces        []replacesYAML `yaml:"replaces"`
	// redlimit's extensions.
	Algorithm string `yaml:"algorithm"`
	Interval  string `yaml:"interval"`
	Burst     int64  `yaml:"burst"`
	Capacity  int64  `yaml:"capacity"`
}

type replacesYAML struct {
	Name string `yaml:"name"`
}

// MaxFileSize bounds a rules file.
const MaxFileSize = 4 << 20

// maxDepth bounds the nesting of descriptors.
const maxDepth = 16

// Domain is one file's rules: a domain's tree of descriptors.
type Domain struct {
	Name string
	File string
	root node
	// Rules lists every rule of the domain in file order.
	Rules []*Rule
}

// node is a level of a domain's descriptor tree.
type node struct {
	rule *Rule
	// exact holds "key\x00value" for a descriptor with a value, "key"
	// for one without.
	exact map[string]*node
	// wild holds the descriptors whose value holds a "*", in file order.
	wild []wildcard
	// shared: matched through a wildcard, every value counts as the
	// pattern (share_threshold).
	shared bool
	// pattern is the descriptor's value as written.
	pattern string
}

type wildcard struct {
	key string
	// parts is the value split at each "*".
	parts []string
	n     *node
}

// matches reports whether value matches the wildcard's pattern: its
// literal parts in order, the first at the start, the last at the end.
func (w *wildcard) matches(value string) bool {
	first, last := w.parts[0], w.parts[len(w.parts)-1]
	if !strings.HasPrefix(value, first) {
		return false
	}
	rest := value[len(first):]
	if len(rest) < len(last) || !strings.HasSuffix(rest, last) {
		return false
	}
	rest = rest[:len(rest)-len(last)]
	for _, p := range w.parts[1 : len(w.parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// typeNames turns the Go names in YAML's messages into the file's words.
var typeNames = strings.NewReplacer("!!", "", "rules.fileYAML", "a rules file", "rules.descYAML", "a descriptor", "rules.limitYAML", "a limit", "rules.replacesYAML", "a replaces entry", "[]rules.descYAML", "a list of descriptors", "[]rules.limitYAML", "a list of limits")

var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)
var unknownField = regexp.MustCompile(`^field (\S+) not found in type \S+$`)

// Parse reads one rules file's content; file names it in errors.
func Parse(file string, data []byte) (*Domain, error) {
	if len(data) > MaxFileSize {
		return nil, &Error{File: file, Reason: fmt.Sprintf("is %d bytes, at most %d allowed", len(data), MaxFileSize)}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, yamlError(file, err)
	}
	if len(doc.Content) == 0 {
		return nil, &Error{File: file, Reason: "is empty: a rules file needs a domain and descriptors"}
	}
	var f fileYAML
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, yamlError(file, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, &Error{File: file, Line: extra.Line, Reason: "holds more than one YAML document; give each domain its own file"}
	}
	root := doc.Content[0]
	if f.Domain == "" {
		return nil, &Error{File: file, Line: root.Line, Field: "domain", Reason: "must not be empty"}
	}
	d := &Domain{Name: f.Domain, File: file}
	c := compiler{d: d}
	if err := c.level(&d.root, f.Descriptors, child(root, "descriptors"), "descriptors", "", 1); err != nil {
		return nil, err
	}
	return d, nil
}

// yamlError turns a YAML decoding error into an *Error with its line.
func yamlError(file string, err error) error {
	msg := err.Error()
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	e := &Error{File: file, Reason: strings.TrimPrefix(msg, "yaml: ")}
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		e.Reason = m[2]
		if f := unknownField.FindStringSubmatch(m[2]); f != nil {
			e.Field = f[1]
			e.Reason = "unknown field"
		}
		e.Reason = typeNames.Replace(e.Reason)
	}
	return e
}

// child returns the value of key in mapping n, or n when absent (so that
// an error about it points at the mapping).
func child(n *yaml.Node, key string) *yaml.Node {
	if n != nil && n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				return n.Content[i+1]
			}
		}
	}
	return n
}

// item returns the i-th item of sequence n, or n.
func item(n *yaml.Node, i int) *yaml.Node {
	if n != nil && n.Kind == yaml.SequenceNode && i < len(n.Content) {
		return n.Content[i]
	}
	return n
}

func line(n *yaml.Node) int {
	if n == nil {
		return 0
	}
	return n.Line
}

type compiler struct {
	d *Domain
}

func (c *compiler) fail(n *yaml.Node, field, reason string, args ...any) error {
	return &Error{File: c.d.File, Line: line(n), Field: field, Reason: fmt.Sprintf(reason, args...)}
}

// level compiles the descriptors of one level into n.
func (c *compiler) level(n *node, descs []descYAML, yn *yaml.Node, field, parent string, depth int) error {
	if depth > maxDepth {
		return c.fail(yn, field, "descriptors nest deeper than %d levels", maxDepth)
	}
	n.exact = make(map[string]*node, len(descs))
	for i := range descs {
		dy := &descs[i]
		dn := item(yn, i)
		f := fmt.Sprintf("%s[%d]", field, i)
		if dy.Key == "" {
			return c.fail(dn, f+".key", "must not be empty")
		}
		seg := escape(dy.Key)
		id := dy.Key
		if dy.Value != "" {
			seg += "=" + escape(dy.Value)
			id += "\x00" + dy.Value
		}
		path := seg
		if parent != "" {
			path = parent + "/" + seg
		}
		if _, dup := n.exact[id]; dup {
			return c.fail(dn, f, "duplicate descriptor %q at this level", path)
		}
		cn, err := c.rule(dy, dn, f, path)
		if err != nil {
			return err
		}
		wild := strings.Contains(dy.Value, "*")
		if dy.ShareThreshold && !wild {
			return c.fail(child(dn, "share_threshold"), f+".share_threshold", "applies to a value with a '*' only")
		}
		cn.shared, cn.pattern = dy.ShareThreshold, dy.Value
		if err := c.level(cn, dy.Descriptors, childNode(dn, "descriptors"), f+".descriptors", path, depth+1); err != nil {
			return err
		}
		n.exact[id] = cn
		if wild {
			n.wild = append(n.wild, wildcard{key: dy.Key, parts: strings.Split(dy.Value, "*"), n: cn})
		}
	}
	return nil
}

// childNode is child, or nil when the key is absent.
func childNode(n *yaml.Node, key string) *yaml.Node {
	if c := child(n, key); c != n {
		return c
	}
	return nil
}

// rule compiles one descriptor's own limits into a node.
func (c *compiler) rule(dy *descYAML, dn *yaml.Node, field, path string) (*node, error) {
	out := &node{}
	if dy.RateLimit == nil && len(dy.Limits) == 0 {
		for _, m := range []struct {
			name string
			set  bool
		}{{"shadow_mode", dy.ShadowMode}, {"quota_mode", dy.QuotaMode}} {
			if m.set {
				return nil, c.fail(child(dn, m.name), field+"."+m.name, "needs rate_limit or limits")
			}
		}
		return out, nil
	}
	if len(path) > 900 {
		return nil, c.fail(dn, field, "the descriptor's path is %d bytes, at most 900 allowed", len(path))
	}
	r := &Rule{Domain: c.d.Name, Path: path, ShadowMode: dy.ShadowMode, QuotaMode: dy.QuotaMode, DetailedMetric: dy.DetailedMetric, File: c.d.File, Line: line(dn)}
	switch {
	case dy.RateLimit != nil && len(dy.Limits) > 0:
		return nil, c.fail(child(dn, "limits"), field+".limits", "give rate_limit or limits, not both")
	case dy.RateLimit != nil:
		if err := c.limit(r, dy.RateLimit, child(dn, "rate_limit"), field+".rate_limit", true); err != nil {
			return nil, err
		}
	default:
		if len(dy.Limits) > redlimit.MaxLimits {
			return nil, c.fail(child(dn, "limits"), field+".limits", "has %d limits, at most %d allowed", len(dy.Limits), redlimit.MaxLimits)
		}
		ln := child(dn, "limits")
		for i := range dy.Limits {
			if err := c.limit(r, &dy.Limits[i], item(ln, i), fmt.Sprintf("%s.limits[%d]", field, i), false); err != nil {
				return nil, err
			}
		}
	}
	out.rule = r
	c.d.Rules = append(c.d.Rules, r)
	return out, nil
}

// limit adds one rate_limit (or limits item) to r.
func (c *compiler) limit(r *Rule, ly *limitYAML, ln *yaml.Node, field string, single bool) error {
	if single {
		r.Name = ly.Name
	}
	for _, rp := range ly.Replaces {
		if rp.Name == "" {
			return c.fail(child(ln, "replaces"), field+".replaces", "an entry has an empty name")
		}
		if rp.Name == ly.Name {
			return c.fail(child(ln, "replaces"), field+".replaces", "names the limit itself (%q)", rp.Name)
		}
		r.Replaces = append(r.Replaces, rp.Name)
	}
	if ly.Unlimited {
		if !single {
			return c.fail(child(ln, "unlimited"), field+".unlimited", "use it on rate_limit, not in limits")
		}
		// envoyproxy/ratelimit refuses a unit here and ignores
		// requests_per_unit; so does redlimit.
		if ly.Unit != "" || ly.Interval != "" || ly.Algorithm != "" || ly.Burst != 0 || ly.Capacity != 0 {
			return c.fail(child(ln, "unlimited"), field+".unlimited", "an unlimited limit takes no unit, interval, algorithm, burst or capacity")
		}
		r.Unlimited = true
		return nil
	}
	var interval time.Duration
	switch {
	case ly.Unit != "" && ly.Interval != "":
		return c.fail(child(ln, "interval"), field+".interval", "give unit or interval, not both")
	case ly.Interval != "":
		d, err := time.ParseDuration(ly.Interval)
		if err != nil || d <= 0 {
			return c.fail(child(ln, "interval"), field+".interval", "%q is not a positive Go duration (1s, 1500ms, 2h)", ly.Interval)
		}
		if ly.UnitMultiplier != nil {
			return c.fail(child(ln, "unit_multiplier"), field+".unit_multiplier", "goes with unit, not interval")
		}
		interval = d
	case ly.Unit != "":
		u := Unit(strings.ToLower(ly.Unit)).Duration()
		if u == 0 {
			return c.fail(child(ln, "unit"), field+".unit", "unknown unit %q (second, minute, hour, day, week, month, year)", ly.Unit)
		}
		mult := int64(1)
		if ly.UnitMultiplier != nil {
			mult = *ly.UnitMultiplier
			if mult < 1 || mult > 1<<20 {
				return c.fail(child(ln, "unit_multiplier"), field+".unit_multiplier", "must be 1..%d", 1<<20)
			}
		}
		interval = u * time.Duration(mult)
	default:
		return c.fail(ln, field+".unit", "missing: give unit (second, minute, hour, day, week, month, year) or interval")
	}
	if ly.RequestsPerUnit == nil {
		return c.fail(ln, field+".requests_per_unit", "missing")
	}
	rate := *ly.RequestsPerUnit
	if rate < 0 {
		return c.fail(child(ln, "requests_per_unit"), field+".requests_per_unit", "must not be negative")
	}
	if rate == 0 {
		// envoyproxy/ratelimit refuses every request under a limit of 0.
		if !single {
			return c.fail(child(ln, "requests_per_unit"), field+".requests_per_unit", "0 (refuse everything) goes on rate_limit, not in limits")
		}
		r.Blocked, r.BlockedInterval = true, interval
		return nil
	}
	cfg := redlimit.Config{Algorithm: redlimit.FixedWindow, Rate: rate, Interval: interval, Burst: ly.Burst, Capacity: ly.Capacity}
	if ly.Algorithm != "" {
		a, err := redlimit.ParseAlgorithm(ly.Algorithm)
		if err != nil {
			return c.fail(child(ln, "algorithm"), field+".algorithm", "%s", argReason(err))
		}
		cfg.Algorithm = a
	}
	norm, err := cfg.Normalize()
	if err != nil {
		var ae *redlimit.ArgumentError
		f := field
		if errors.As(err, &ae) {
			name := map[string]string{"rate": "requests_per_unit", "interval": "unit", "burst": "burst", "capacity": "capacity", "algorithm": "algorithm"}[ae.Arg]
			if name == "unit" && ly.Interval != "" {
				name = "interval"
			}
			if name != "" {
				f += "." + name
				ln = child(ln, name)
			}
		}
		return c.fail(ln, f, "%s", argReason(err))
	}
	name := ly.Name
	if single {
		name = ""
	}
	r.Limits = append(r.Limits, Limit{Name: name, Config: norm})
	return nil
}

// argReason is a redlimit error's message without its package prefix.
func argReason(err error) string {
	return strings.TrimPrefix(err.Error(), "redlimit: ")
}

// escape keeps a path segment unambiguous: '%', '/' and '=' are escaped.
func escape(s string) string {
	if !strings.ContainsAny(s, "%/=") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	escapeTo(&b, s)
	return b.String()
}

// escapeTo writes escape(s) to b.
func escapeTo(b *strings.Builder, s string) {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		switch ch := s[i]; ch {
		case '%', '/', '=':
			b.WriteByte('%')
			b.WriteByte(hex[ch>>4])
			b.WriteByte(hex[ch&15])
		default:
			b.WriteByte(ch)
		}
	}
}
