package main

import "testing"

// TestSystemPrefixes: every system's keys live under a prefix of its own,
// all of one length, so that the bytes per key compare like with like.
func TestSystemPrefixes(t *testing.T) {
	e := &env{prefix: "redlimit-bench:"}
	seen := map[string]string{}
	length := -1
	for _, s := range systems() {
		p := e.systemPrefix(s.Name)
		if other, ok := seen[p]; ok {
			t.Errorf("%q and %q share the prefix %q", s.Name, other, p)
		}
		seen[p] = s.Name
		if length >= 0 && len(p) != length {
			t.Errorf("%q: prefix %q is %d bytes, others %d", s.Name, p, len(p), length)
		}
		length = len(p)
	}
}
