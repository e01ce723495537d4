package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchNotFound: outside the source tree there is no benchmark to run,
// and the command says so (exit 2) instead of compiling the peers in.
func TestBenchNotFound(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	r := call(t, deps{}, "bench", "--quick")
	if r.code != exitError || r.stdout != "" {
		t.Fatalf("bench outside the tree: %s", r)
	}
	for _, want := range []string{"redlimit bench: no bench/go.mod in ", filepath.Base(dir), "source tree", "not compiled into this command on purpose"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr %q lacks %q", r.stderr, want)
		}
	}
}

// TestFindBenchDir: from anywhere in the source tree, bench/ at its root.
func TestFindBenchDir(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	got, err := findBenchDir(wd)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(filepath.Dir(filepath.Dir(wd)), "bench"); got != want {
		t.Errorf("findBenchDir(%s) = %s, want %s", wd, got, want)
	}
	// A bench folder without go.mod is not the benchmark.
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "a", "bench"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := findBenchDir(filepath.Join(root, "a")); err == nil {
		t.Errorf("found %s without a go.mod", got)
	}
}
