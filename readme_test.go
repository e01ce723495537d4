package redlimit_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// fileBlock matches a Go block of the README that is marked as a copy of a
// file of the repository: "<!-- file: PATH -->", then the block.
var fileBlock = regexp.MustCompile("(?m)^<!-- file: (\\S+) -->\\n```go\\n((?s:.*?))^```$")

// TestReadmeFiles holds the README's quick start to the files it copies,
// which `go build ./...` compiles and examples/quickstart/redis's test runs
// against a real redis-server: a change to either that is not made to the
// other fails here.
func TestReadmeFiles(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := fileBlock.FindAllSubmatch(readme, -1)
	seen := map[string]bool{}
	for _, b := range blocks {
		path, text := string(b[1]), string(b[2])
		seen[path] = true
		want, err := os.ReadFile(filepath.FromSlash(path))
		if err != nil {
			t.Errorf("README copies %s: %v", path, err)
			continue
		}
		if text != string(want) {
			t.Errorf("README's copy of %s differs from the file (first difference at line %d): copy the file into the README", path, firstDiff(text, string(want)))
		}
	}
	for _, path := range []string{"examples/quickstart/memory/main.go", "examples/quickstart/redis/main.go"} {
		if !seen[path] {
			t.Errorf("README has no block marked <!-- file: %s --> (found %d marked blocks)", path, len(blocks))
		}
	}
}

// firstDiff is the 1-based number of the first line where a and b differ.
func firstDiff(a, b string) int {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(la), len(lb)) {
		if la[i] != lb[i] {
			return i + 1
		}
	}
	return min(len(la), len(lb)) + 1
}
