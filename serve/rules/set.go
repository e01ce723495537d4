package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Set is every domain's rules, as loaded from a file or a directory. It
// is not changed after Load, so any number of goroutines may Match on it.
type Set struct {
	domains map[string]*Domain
	// Digest identifies the content loaded (a SHA-256 over the files'
	// names and bytes): two loads of the same content have the same one.
	Digest string
	// Files are the files loaded, in order.
	Files []string
}

// NewSet gathers domains into a Set; two of one name are an *Error.
func NewSet(domains ...*Domain) (*Set, error) {
	s := &Set{domains: make(map[string]*Domain, len(domains))}
	for _, d := range domains {
		if old, dup := s.domains[d.Name]; dup {
			return nil, &Error{File: d.File, Field: "domain", Reason: fmt.Sprintf("domain %q is also defined in %s", d.Name, old.File)}
		}
		s.domains[d.Name] = d
		s.Files = append(s.Files, d.File)
	}
	return s, nil
}

// Domains returns the domains' names, sorted.
func (s *Set) Domains() []string {
	out := make([]string, 0, len(s.domains))
	for n := range s.domains {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Domain returns the rules of one domain, or nil.
func (s *Set) Domain(name string) *Domain { return s.domains[name] }

// Rules returns every rule of every domain, by domain name then file order.
func (s *Set) Rules() []*Rule {
	var out []*Rule
	for _, n := range s.Domains() {
		out = append(out, s.domains[n].Rules...)
	}
	return out
}

// Load reads the rules at path: one YAML file, or every *.yaml and *.yml
// file directly in a directory (names starting with "." skipped, as
// Kubernetes' "..data" is; symbolic links followed). A directory with no
// rules file is an *Error.
func Load(path string) (*Set, error) {
	files, err := list(path)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	var domains []*Domain
	for _, f := range files {
		data, err := readFile(f)
		if err != nil {
			return nil, err
		}
		hashFile(h, f, data)
		d, err := Parse(f, data)
		if err != nil {
			return nil, err
		}
		domains = append(domains, d)
	}
	s, err := NewSet(domains...)
	if err != nil {
		return nil, err
	}
	s.Digest = hex.EncodeToString(h.Sum(nil))
	return s, nil
}

// Digest returns the Digest that Load would give the content at path now,
// good or bad, without parsing it: a reloader compares it with the last
// one it tried.
func Digest(path string) (string, error) {
	files, err := list(path)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, f := range files {
		data, err := readFile(f)
		if err != nil {
			return "", err
		}
		hashFile(h, f, data)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func hashFile(h io.Writer, name string, data []byte) {
	fmt.Fprintf(h, "%s\x00%d\x00", filepath.Base(name), len(data))
	h.Write(data)
}

// list returns the rules files at path (see Load).
func list(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	var files []string
	for _, e := range ents {
		n := e.Name()
		if strings.HasPrefix(n, ".") || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
			continue
		}
		f := filepath.Join(path, n)
		if fi, err := os.Stat(f); err != nil || fi.IsDir() {
			continue
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return nil, &Error{File: path, Reason: "holds no *.yaml or *.yml rules file"}
	}
	return files, nil
}

// readFile reads a file of at most MaxFileSize bytes.
func readFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	if len(data) > MaxFileSize {
		return nil, &Error{File: name, Reason: fmt.Sprintf("is over %d bytes", MaxFileSize)}
	}
	return data, nil
}

// Match finds the rule for one descriptor of a request, as
// envoyproxy/ratelimit does: entry by entry down the domain's tree, each
// entry matching a descriptor with its key and value, else one whose
// value holds "*" and matches it (the first in file order), else one
// with its key and no value; the rule applies only if the last entry
// reached a descriptor with a limit. It returns nil when no rule applies
// (an unknown domain included).
func (s *Set) Match(domain string, entries []Entry) *Rule {
	r, _ := s.MatchKey(domain, entries)
	return r
}

// MatchKey is Match that also returns the descriptor's key within its
// rule: its values, each escaped as Path's segments are and joined by
// '/', a value matched by a share_threshold wildcard replaced by the
// pattern (so all such values share one count). The key is never empty.
func (s *Set) MatchKey(domain string, entries []Entry) (*Rule, string) {
	d := s.domains[domain]
	if d == nil {
		return nil, ""
	}
	n := &d.root
	var patterns []string
	var buf [128]byte // the lookups' "key\x00value", on the stack when short
	for i, e := range entries {
		id := append(append(append(buf[:0], e.Key...), 0), e.Value...)
		next := n.exact[string(id)] // looked up without a copy
		if next == nil {
			for j := range n.wild {
				if w := &n.wild[j]; w.key == e.Key && w.matches(e.Value) {
					next = w.n
					if next.shared {
						if patterns == nil {
							patterns = make([]string, len(entries))
						}
						patterns[i] = next.pattern
					}
					break
				}
			}
		}
		if next == nil {
			next = n.exact[e.Key]
		}
		if next == nil {
			return nil, ""
		}
		if i == len(entries)-1 {
			if next.rule == nil {
				return nil, ""
			}
			return next.rule, key(entries, patterns)
		}
		n = next
	}
	return nil, ""
}

// key builds MatchKey's key. A shared level is written "%*" and its
// pattern: an escaped value never holds "%*".
func key(entries []Entry, patterns []string) string {
	if patterns == nil && len(entries) == 1 && entries[0].Value != "" && !strings.ContainsAny(entries[0].Value, "%/=") {
		return entries[0].Value
	}
	var b strings.Builder
	size := len(entries) + 8 // the separators, and room for a few escapes
	for i, e := range entries {
		if patterns != nil && patterns[i] != "" {
			size += 2 + len(patterns[i])
		} else {
			size += len(e.Value)
		}
	}
	b.Grow(size)
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('/')
		}
		if patterns != nil && patterns[i] != "" {
			b.WriteString("%*")
			escapeTo(&b, patterns[i])
			continue
		}
		escapeTo(&b, e.Value)
	}
	if b.Len() == 0 {
		return "%"
	}
	return b.String()
}
