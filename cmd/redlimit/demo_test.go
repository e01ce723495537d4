package main

import (
	"bytes"
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/redlimit/redlimit/internal/syncbuf"
)

// lineWriter hands each complete line written to it to lines.
type lineWriter struct {
	mu    sync.Mutex
	buf   []byte
	lines chan string
}

func newLineWriter() *lineWriter { return &lineWriter{lines: make(chan string, 1000)} }

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.lines <- string(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
}

// TestDemo runs the demo with 5 callers at 1 per second on a fake clock,
// moving it one interval at a time once every caller waits: one grant per
// interval, each caller exactly once, each waiting as long as its turn came
// after the start (so served in the order of the reservations), 4s in all.
func TestDemo(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			out := newLineWriter()
			g := start(t, b.deps, out, b.with("demo", "--callers", "5", "--rate", "1", "--interval", "1s", "--name", "demo5")...)
			next := func() string {
				t.Helper()
				select {
				case l := <-out.lines:
					return l
				case <-g.done:
					select {
					case l := <-out.lines:
						return l
					default:
						t.Fatalf("demo ended early: exit %d, stderr %q", g.code, g.stderr.String())
						return ""
					}
				}
			}
			// One caller is granted at once; the 4 others wait on the clock,
			// and no more.
			g.waitForTimers(t, b.fake, 4)
			if n := b.fake.Timers(); n != 4 {
				t.Fatalf("%d callers wait, want 4", n)
			}
			grant := regexp.MustCompile(`^caller (0[1-5]) granted at \+(\d+\.\d{3})s \(waited (\d+\.\d{3})s\)$`)
			seen := map[string]bool{}
			for k := range 5 {
				if k > 0 {
					advance(t, b.fake, time.Second, 4-k)
				}
				line := next()
				m := grant.FindStringSubmatch(line)
				want := fmt.Sprintf("%d.000", k)
				// Numbered in the order granted, from caller 1.
				if m == nil || m[1] != fmt.Sprintf("%02d", k+1) || m[2] != want || m[3] != want || seen[m[1]] {
					t.Fatalf("grant %d: %q; want caller %02d granted at +%ss (waited %ss)", k, line, k+1, want, want)
				}
				seen[m[1]] = true
			}
			if l := next(); l != "5 callers, 1 per 1s: all granted in 4.0s" {
				t.Errorf("summary %q", l)
			}
			g.wait(t, b.fake)
			if g.code != 0 || g.stderr.String() != "" {
				t.Errorf("exit %d, stderr %q", g.code, g.stderr.String())
			}
			select {
			case l := <-out.lines:
				t.Errorf("extra line %q", l)
			default:
			}
		})
	}
}

// runDemoJSON runs the demo with --json, waits until waiting callers wait,
// moves the clock by by and decodes the output.
func runDemoJSON(t *testing.T, b backend, waiting int, by time.Duration, args ...string) demoOut {
	t.Helper()
	var stdout syncbuf.Buffer
	g := start(t, b.deps, &stdout, b.with(append([]string{"demo", "--json"}, args...)...)...)
	g.waitForTimers(t, b.fake, waiting)
	// All at once: the times reported do not depend on the order in which
	// the callers wake.
	advance(t, b.fake, by, 0)
	g.wait(t, b.fake)
	if g.code != 0 || g.stderr.String() != "" {
		t.Fatalf("demo %q: exit %d, stderr %q", args, g.code, g.stderr.String())
	}
	var out demoOut
	decodeOne(t, stdout.String(), &out)
	return out
}

func TestDemoJSON(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			// Run twice: the demo resets the limiter, so the second run
			// starts afresh although the first one's grants still count.
			for run := range 2 {
				out := runDemoJSON(t, b, 4, 4*time.Second, "--callers", "5", "--interval", "1s", "--name", "dj")
				sec := configOut{Algorithm: "sliding-log", Mode: "overall", Rate: 1, Interval: "1s", IntervalMS: 1000}
				if out.Name != "dj" || out.Callers != 5 || out.Permits != 1 || out.Config != sec || out.ElapsedMS != 4000 || len(out.Grants) != 5 {
					t.Fatalf("run %d: %+v", run, out)
				}
				seen := map[int]bool{}
				for k, g := range out.Grants {
					if g.AtMS != int64(k)*1000 || g.WaitedMS != g.AtMS || g.Caller != k+1 || seen[g.Caller] {
						t.Errorf("run %d: grant %d: %+v; want caller %d at %dms", run, k, g, k+1, k*1000)
					}
					seen[g.Caller] = true
				}
			}

			// 2 per second, 2 permits each: one caller per second.
			out := runDemoJSON(t, b, 2, 2*time.Second, "--callers", "3", "--rate", "2", "--permits", "2", "--name", "dj2")
			var ats []int64
			for _, g := range out.Grants {
				ats = append(ats, g.AtMS)
			}
			if out.Permits != 2 || out.Config.Rate != 2 || fmt.Sprint(ats) != "[0 1000 2000]" || out.ElapsedMS != 2000 {
				t.Errorf("2 permits at 2 per second: %+v", out)
			}

			// 4 per second, 1 permit each, 10 callers: 4, 4, then 2.
			out = runDemoJSON(t, b, 6, 2*time.Second, "--callers", "10", "--rate", "4", "--name", "dj3")
			ats = nil
			for _, g := range out.Grants {
				ats = append(ats, g.AtMS)
			}
			if fmt.Sprint(ats) != "[0 0 0 0 1000 1000 1000 1000 2000 2000]" || out.ElapsedMS != 2000 {
				t.Errorf("10 callers at 4 per second: %+v", out)
			}
		})
	}
}
