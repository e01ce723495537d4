// Package redissonseed reads Redisson's RRateLimiter scripts (up to 3.16.x)
// out of the article that quotes them (File), so that the interop tests
// and the benchmark run Redisson's own Lua rather than a copy of ours.
package redissonseed

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// File is the seed that quotes Redisson's scripts, under shared/seeds.
const File = "001_a9b47b543f19bcec.txt"

// Find returns the shared/seeds folder in dir or its nearest parent that
// has one.
func Find(dir string) (string, error) {
	start := dir
	for {
		p := filepath.Join(dir, "shared", "seeds")
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no shared/seeds folder in %s or any parent (Redisson's scripts are read from seed %s)", start, File)
		}
		dir = parent
	}
}

// Variant is one of the article's copies of the tryAcquire script.
type Variant struct {
	From, Src string
}

// Scripts are Redisson's scripts as the article quotes them.
type Scripts struct {
	// TryAcquire lists the complete copies of tryAcquire, in the order to
	// prefer them: the Java string Redisson sends, the fenced Lua blocks,
	// the commented copy.
	TryAcquire []Variant
	// TrySetRate (three HSETNX) and SetRate; "" when not found.
	TrySetRate, SetRate string
}

// Read reads and parses the seed in seedsDir.
func Read(seedsDir string) (Scripts, error) {
	raw, err := os.ReadFile(filepath.Join(seedsDir, File))
	if err != nil {
		return Scripts{}, fmt.Errorf("reading Redisson's scripts: %w", err)
	}
	return Parse(string(raw)), nil
}

var (
	// markdownEscape matches the backslashes the article's markdown put
	// before punctuation (KEYS\[1\], EVAL\_BOOLEAN, \-- comments).
	markdownEscape = regexp.MustCompile(`\\([!-/:-@\[-` + "`" + `{-~])`)
	javaTryAcquire = regexp.MustCompile(`(?s)command,\s*"(local rate = redis\.call\('hget'.*?)",\s*Arrays\.asList`)
	fencedLua      = regexp.MustCompile("(?s)```lua\n(.*?)```")
	commentedCopy  = regexp.MustCompile(`(?s)加上了注释。\s*\n(.*?)\n###`)
	javaTrySetRate = regexp.MustCompile(`(?s)EVAL_BOOLEAN, "(redis\.call\('hsetnx'.*?)",\s*Collections\.singletonList`)
	javaSetRate    = regexp.MustCompile(`(?s)EVAL_BOOLEAN,\s*((?:"(?:[^"\\]|\\.)*"\s*\+?\s*)+),\s*Arrays\.asList\(getName\(\), getValueName\(\), getPermitsName\(\)\)`)
	javaLiteral    = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)
)

// Parse extracts the scripts from the seed's text.
func Parse(raw string) Scripts {
	text := markdownEscape.ReplaceAllString(raw, "$1")
	var all []Variant
	if m := javaTryAcquire.FindStringSubmatch(text); m != nil {
		all = append(all, Variant{"the Java string of tryAcquireAsync", m[1]})
	}
	for _, m := range fencedLua.FindAllStringSubmatch(text, -1) {
		all = append(all, Variant{"a fenced Lua block", m[1]})
	}
	if m := commentedCopy.FindStringSubmatch(text); m != nil {
		all = append(all, Variant{"the commented copy", m[1]})
	}
	var s Scripts
	for _, v := range all {
		if strings.Contains(v.Src, "zremrangebyscore") && strings.Contains(v.Src, "struct.pack('fI', ARGV[3], ARGV[1])") &&
			strings.Contains(v.Src, "'RateLimiter is not initialized'") && strings.Contains(v.Src, "'+inf'") {
			s.TryAcquire = append(s.TryAcquire, v)
		}
	}
	if m := javaTrySetRate.FindStringSubmatch(text); m != nil && strings.Contains(m[1], "hsetnx") {
		s.TrySetRate = m[1]
	}
	if m := javaSetRate.FindStringSubmatch(text); m != nil {
		var b strings.Builder
		for _, lit := range javaLiteral.FindAllStringSubmatch(m[1], -1) {
			b.WriteString(lit[1])
		}
		s.SetRate = b.String()
	}
	return s
}
