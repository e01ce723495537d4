package rls_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/redlimit/redlimit/bench/rls"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/serve"
	"github.com/redlimit/redlimit/serve/rules"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// runServe runs redlimit's service (serve.Run, as the command runs it) on
// the Redis at url with rules until the test ends, and returns its gRPC
// address.
func runServe(t *testing.T, url, rulesText string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(file, []byte(rulesText), 0o600); err != nil {
		t.Fatal(err)
	}
	addrs := make(chan net.Addr, 2)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serve.Run(ctx, serve.Config{Rules: file, Redis: url, GRPCAddr: "127.0.0.1:0", HTTPAddr: "-",
			Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
			OnListen: func(g, _ net.Addr) { addrs <- g }})
	}()
	select {
	case err := <-done:
		cancel()
		t.Fatalf("serve.Run: %v", err)
	case g := <-addrs:
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve.Run: %v", err)
			}
		})
		return g.String()
	}
	return ""
}

// rulesOf is Rules with the "cmp" limit set to n per second.
func rulesOf(t *testing.T, n string) string {
	t.Helper()
	s := strings.Replace(string(rls.Rules), "requests_per_unit: 20}", "requests_per_unit: "+n+"}", 1)
	if s == string(rls.Rules) {
		t.Fatal("rules.yaml no longer has the cmp limit of 20")
	}
	return s
}

// TestRulesFile: rules.yaml is what the package's defaults name, and
// redlimit reads it.
func TestRulesFile(t *testing.T) {
	d, err := rules.Parse("rules.yaml", rls.Rules)
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != rls.Domain {
		t.Fatalf("domain %q, want %q", d.Name, rls.Domain)
	}
	for _, key := range []string{rls.CompareKey, rls.LoadKey} {
		if !strings.Contains(string(rls.Rules), "- key: "+key+"\n") {
			t.Errorf("no descriptor %q", key)
		}
	}
}

// TestDecisionsOfTwoRedlimits compares two real services on one real
// Redis: with the same rules they agree call by call and both count as a
// fixed window (the values per system keep their counts apart); with
// another limit on B, every call of every window differs.
func TestDecisionsOfTwoRedlimits(t *testing.T) {
	rs := redistest.Start(t)
	url := "redis://" + rs.Addr + "/0"
	three := rulesOf(t, "3")
	a := rls.System{Name: "a", Addr: runServe(t, url, three)}
	b := rls.System{Name: "b", Addr: runServe(t, url, three)}
	// Instances on one Redis share their rules' limits (the last one
	// loaded wins): C's other limit needs a Redis database of its own.
	c := rls.System{Name: "c", Addr: runServe(t, "redis://"+rs.Addr+"/1", rulesOf(t, "4"))}
	ctx := context.Background()

	r, err := rls.Decisions(ctx, a, b, rls.Options{Windows: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Equal || r.Compared != 2 || len(r.Mismatches) != 0 || r.FixedWindow != [2]bool{true, true} {
		t.Fatalf("same rules: equal=%v compared=%d mismatches=%v fixed=%v", r.Equal, r.Compared, r.Mismatches, r.FixedWindow)
	}
	if r.Limit != 3 || r.Unit != "SECOND" || r.Burst != 8 {
		t.Errorf("limit %d per %s, burst %d; want 3 per SECOND, 8", r.Limit, r.Unit, r.Burst)
	}
	for _, w := range r.Windows {
		if w.Skipped == "" && (len(w.A) != 8 || w.A[2].Remaining != 0 || w.A[2].Code != "OK" || w.A[3].Code != "OVER_LIMIT") {
			t.Errorf("window answers %v", w.A)
		}
	}
	var md bytes.Buffer
	r.WriteMarkdown(&md)
	if !strings.Contains(md.String(), "**equal**") || !strings.Contains(md.String(), "3 OK (remaining 2..0, reset 1s), 5 OVER_LIMIT (remaining 0, reset 1s)") {
		t.Errorf("report:\n%s", md.String())
	}

	r, err = rls.Decisions(ctx, a, c, rls.Options{Windows: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.Equal || r.Compared != 1 || r.FixedWindow != [2]bool{true, false} {
		t.Fatalf("other limit: equal=%v compared=%d fixed=%v", r.Equal, r.Compared, r.FixedWindow)
	}
	// A is 3 per second, C 4: every call's limit differs.
	if m := r.Mismatches; len(m) != 8 || m[0].A.Remaining != 2 || m[0].B.Remaining != 3 || m[3].A.Code != "OVER_LIMIT" || m[3].B.Code != "OK" {
		t.Fatalf("mismatches %v", m)
	}
	md.Reset()
	r.WriteMarkdown(&md)
	if !strings.Contains(md.String(), "**not equal**: 8 calls") {
		t.Errorf("report:\n%s", md.String())
	}
}

// TestMeasureTwoRedlimits runs a tiny load on two real services and
// checks the report's shape (no speed is asserted).
func TestMeasureTwoRedlimits(t *testing.T) {
	rs := redistest.Start(t)
	url := "redis://" + rs.Addr + "/0"
	a := rls.System{Name: "a", Addr: runServe(t, url, string(rls.Rules))}
	b := rls.System{Name: "b", Addr: runServe(t, url, string(rls.Rules))}
	// Both services run in this process.
	a.PID, b.PID = os.Getpid(), os.Getpid()
	r, err := rls.Measure(context.Background(), a, b, rls.LoadOptions{Callers: []int{1, 3}, Rounds: 2,
		Duration: 100 * time.Millisecond, Warmup: 10 * time.Millisecond, Conns: 2, Redis: rs.Addr, OneValue: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Measurements) != 8 || len(r.Cells) != 2 {
		t.Fatalf("%d measurements, %d cells", len(r.Measurements), len(r.Cells))
	}
	// Round 1: a then b; round 2: b then a.
	if order := []string{r.Measurements[0].System, r.Measurements[1].System, r.Measurements[2].System, r.Measurements[3].System}; order[0] != "a" || order[1] != "b" || order[2] != "b" || order[3] != "a" {
		t.Errorf("order %v", order)
	}
	// A measurement may see no call complete in its window on a machine
	// busy enough; what is measured must add up.
	var total int64
	for _, m := range r.Measurements {
		total += m.Decisions
		if m.Errors != 0 || m.Refused != 0 || (m.Decisions > 0) != (m.P50 > 0) || m.P99 < m.P50 || m.P999 < m.P99 ||
			m.PerSecond != float64(m.Decisions)/0.1 || (m.Decisions > 0) != (m.RedisCmds > 0) {
			t.Errorf("measurement %+v", m)
		}
	}
	if total == 0 {
		t.Error("no call measured")
	}
	for _, c := range r.Cells {
		if len(c.Ratios) != c.Ratio.N || len(c.P99Ratios) != c.Ratio.N || c.Ratio.N > 2 || c.PerSecond[0].N != 2 || c.P99[1].Max < c.P99[1].Min {
			t.Errorf("cell %+v", c)
		}
	}
	var md bytes.Buffer
	r.WriteMarkdown(&md)
	// Two tables (speed; CPU and commands), each a header and 2 rows.
	if lines := strings.Count(md.String(), "\n| "); lines != 6 || !strings.Contains(md.String(), "Redis commands (a)") || !strings.Contains(md.String(), "every caller on one value") {
		t.Errorf("report has %d table rows, want 2 x (header + 2):\n%s", lines, md.String())
	}
}

func TestBadSystems(t *testing.T) {
	ctx := context.Background()
	for _, pair := range [][2]rls.System{
		{{Name: "a", Addr: "x:1"}, {Name: "a", Addr: "y:1"}},
		{{Name: "a b", Addr: "x:1"}, {Name: "b", Addr: "y:1"}},
		{{Name: "a", Addr: ""}, {Name: "b", Addr: "y:1"}},
	} {
		if _, err := rls.Decisions(ctx, pair[0], pair[1], rls.Options{}); err == nil {
			t.Errorf("Decisions(%v): no error", pair)
		}
		if _, err := rls.Measure(ctx, pair[0], pair[1], rls.LoadOptions{}); err == nil {
			t.Errorf("Measure(%v): no error", pair)
		}
	}
}
