package serve_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit/serve"
	"github.com/redlimit/redlimit/serve/decide"
	"github.com/redlimit/redlimit/serve/rules"
)

func limitRules(rate int) string {
	return "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: " + strconv.Itoa(rate) + "}\n"
}

// replace writes content to a file beside dir and renames it over
// name, as editors and config tools do: a reader sees the old or the new
// content, never a part.
func replace(t testing.TB, name, content string) {
	t.Helper()
	tmp := filepath.Join(t.TempDir(), "new")
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, name); err != nil {
		t.Fatal(err)
	}
}

// reloads collects OnReload reports.
type reloads chan serve.Reload

func (r reloads) next(t *testing.T) serve.Reload {
	t.Helper()
	select {
	case ev := <-r:
		return ev
	case <-time.After(30 * time.Second): // a failure bound, not a wait
		t.Fatal("no reload reported")
		return serve.Reload{}
	}
}

func rateOf(t *testing.T, d *decide.Decider) int64 {
	t.Helper()
	return d.Rules().Domain("edge").Rules[0].Limits[0].Config.Rate
}

func startWatched(t *testing.T, rulesPath string) (*testServer, reloads) {
	t.Helper()
	evs := make(reloads, 16)
	ts := start(t, serve.Config{Rules: rulesPath, OnReload: func(r serve.Reload) { evs <- r }})
	select {
	case <-ts.srv.Watching():
	case <-time.After(30 * time.Second):
		t.Fatal("not watching")
	}
	return ts, evs
}

func TestReloadFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "rules.yaml")
	replace(t, file, limitRules(3))
	ts, evs := startWatched(t, file)
	d := ts.srv.Decider()
	req := decide.Request{Domain: "edge", Descriptors: []decide.Descriptor{{Entries: []rules.Entry{{Key: "remote_address", Value: "ip"}}}}}
	if _, err := d.Decide(context.Background(), req); err != nil {
		t.Fatal(err)
	}

	replace(t, file, limitRules(10))
	if ev := evs.next(t); ev.Err != nil {
		t.Fatalf("good file refused: %v", ev.Err)
	}
	if got := rateOf(t, d); got != 10 {
		t.Fatalf("rate %d after reload", got)
	}
	r, err := d.Decide(context.Background(), req)
	if err != nil || r.Statuses[0].Remaining != 8 {
		t.Fatalf("the count goes on under the new limit: %+v %v", r.Statuses[0], err)
	}

	replace(t, file, limitRules(10)+"    burts: 3\n")
	ev := evs.next(t)
	var re *rules.Error
	if !errors.As(ev.Err, &re) || re.Line != 5 || re.Field != "burts" {
		t.Fatalf("bad file: %v", ev.Err)
	}
	if got := rateOf(t, d); got != 10 || ts.srv.ReloadFailures() != 1 || ts.srv.LastReloadError() == nil {
		t.Fatalf("after a bad file: rate %d, failures %d", got, ts.srv.ReloadFailures())
	}
	if code, body := get(t, "http://"+ts.httpAddr+"/readyz"); code != http.StatusOK || !strings.Contains(body, "burts") {
		t.Errorf("readyz after a bad file: %d %s", code, body)
	}

	// Back to the content in force: the error clears.
	replace(t, file, limitRules(10))
	if ev := evs.next(t); ev.Err != nil || ts.srv.LastReloadError() != nil {
		t.Fatalf("revert: %v", ev.Err)
	}

	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if ev := evs.next(t); !errors.Is(ev.Err, os.ErrNotExist) || rateOf(t, d) != 10 {
		t.Fatalf("removed file: %v", ev.Err)
	}
	replace(t, file, limitRules(4))
	if ev := evs.next(t); ev.Err != nil || rateOf(t, d) != 4 {
		t.Fatalf("file back: %v", ev.Err)
	}
}

// TestReloadKubernetesConfigMap swaps the "..data" symbolic link as the
// kubelet updates a mounted ConfigMap.
func TestReloadKubernetesConfigMap(t *testing.T) {
	dir := t.TempDir()
	version := func(name string, rate int) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "edge.yaml"), []byte(limitRules(rate)), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(name, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..v1", 3)
	if err := os.Symlink("..data/edge.yaml", filepath.Join(dir, "edge.yaml")); err != nil {
		t.Fatal(err)
	}
	// The directory, then the file (a link through "..data").
	for i, path := range []string{dir, filepath.Join(dir, "edge.yaml")} {
		ts, evs := startWatched(t, path)
		want := int64(3 + i*4) // 3, then 7 left by the first round
		if got := rateOf(t, ts.srv.Decider()); got != want {
			t.Fatalf("%s at start: rate %d, want %d", path, got, want)
		}
		next := 7 + i*2
		version("..v"+strconv.Itoa(next), next)
		if ev := evs.next(t); ev.Err != nil || rateOf(t, ts.srv.Decider()) != int64(next) {
			t.Fatalf("%s: after the swap: %v, rate %d", path, ev.Err, rateOf(t, ts.srv.Decider()))
		}
	}
}

// TestReloadIgnoresOtherFiles: other files beside a rules file, YAML or
// not, are no part of the rules; a change to the rules file is seen.
func TestReloadIgnoresOtherFiles(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "rules.yaml")
	replace(t, file, limitRules(3))
	ts, evs := startWatched(t, file)
	replace(t, filepath.Join(dir, "other.yaml"), "not: [valid")
	replace(t, filepath.Join(dir, "notes.txt"), "anything")
	replace(t, file, limitRules(5))
	if ev := evs.next(t); ev.Err != nil || rateOf(t, ts.srv.Decider()) != 5 {
		t.Fatalf("%v, rate %d", ev.Err, rateOf(t, ts.srv.Decider()))
	}
}
