package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/internal/syncbuf"
	"github.com/redlimit/redlimit/memstore"
	"go.uber.org/goleak"
)

// Every run closes its Redis client and waits for its callers.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is the fake clocks' start.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// result is what one run returned and printed.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
}

// background is a run of the command in a goroutine: one that waits on the
// fake clock. It is cancelled and waited for at the end of the test, so that a
// failing test neither hangs nor leaks it.
type background struct {
	done   chan struct{}
	code   int // set when done is closed
	stderr syncbuf.Buffer
}

func start(t *testing.T, d deps, stdout io.Writer, args ...string) *background {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	g := &background{done: make(chan struct{})}
	go func() {
		defer close(g.done)
		g.code = run(ctx, args, stdout, &g.stderr, d)
	}()
	t.Cleanup(func() {
		cancel()
		<-g.done
	})
	return g
}

// waitForTimers waits until n callers wait on fake and fails if the run ends
// first.
func (g *background) waitForTimers(t *testing.T, fake *clock.Fake, n int) {
	t.Helper()
	if !fake.WaitForTimers(n, g.done) {
		t.Fatalf("the command ended before %d callers waited: exit %d, stderr %q", n, g.code, g.stderr.String())
	}
}

// advance moves fake by d and checks that left callers still wait after
// that: none more, or the test would wait for them forever.
func advance(t *testing.T, fake *clock.Fake, d time.Duration, left int) {
	t.Helper()
	fake.Advance(d)
	if n := fake.Timers(); n != left {
		t.Fatalf("after moving the clock by %s, %d callers wait, want %d", d, n, left)
	}
}

// wait waits for the run to end and fails if a caller starts waiting on
// fake before it does: once the clock has moved past every grant, none may
// (and nothing would move it again).
func (g *background) wait(t *testing.T, fake *clock.Fake) {
	t.Helper()
	if fake.WaitForTimers(1, g.done) {
		t.Fatalf("a caller waits on the clock after it moved past every grant")
	}
}

// call runs the command in-process.
func call(t *testing.T, d deps, args ...string) result {
	t.Helper()
	var stdout, stderr syncbuf.Buffer
	code := run(context.Background(), args, &stdout, &stderr, d)
	return result{code, stdout.String(), stderr.String()}
}

// backend is a store the command runs on, with the arguments that select it
// and the deps that go with it.
type backend struct {
	name string
	args []string // --redis URL, or nothing for the memory store
	deps deps
	fake *clock.Fake
}

// with returns args with the backend's arguments after them (flags may
// follow NAME).
func (b backend) with(args ...string) []string {
	return append(append([]string{}, args...), b.args...)
}

// backends returns the memory store (shared by every run call of the test,
// as one process would share it) and a real Redis, each on a fake clock.
func backends(t *testing.T) []backend {
	memClock := clock.NewFake(t0)
	redisClock := clock.NewFake(t0)
	srv := redistest.Start(t)
	return []backend{
		{name: "memory", deps: deps{Clock: memClock, MemStore: memstore.New(memstore.WithTimeSource(memClock))}, fake: memClock},
		{name: "redis", args: []string{"--redis", srv.URL()}, deps: deps{Clock: redisClock}, fake: redisClock},
	}
}

// step is one run call of a scenario and what it must give.
type step struct {
	args   []string
	code   int
	stdout string // the whole of stdout
	stderr string // a part of stderr; "" means stderr is empty
}

func runSteps(t *testing.T, b backend, steps []step) {
	t.Helper()
	for i, s := range steps {
		r := call(t, b.deps, b.with(s.args...)...)
		if r.code != s.code || r.stdout != s.stdout {
			t.Errorf("step %d: redlimit %s: %s; want exit %d, stdout %q", i, strings.Join(s.args, " "), r, s.code, s.stdout)
			continue
		}
		if s.stderr == "" && r.stderr != "" || !strings.Contains(r.stderr, s.stderr) {
			t.Errorf("step %d: redlimit %s: stderr %q, want %q in it", i, strings.Join(s.args, " "), r.stderr, s.stderr)
		}
	}
}

// JSON outputs, as a client of --json would decode them.
type configOut struct {
	Algorithm  string `json:"algorithm"`
	Mode       string `json:"mode"`
	Rate       int64  `json:"rate"`
	Interval   string `json:"interval"`
	IntervalMS int64  `json:"interval_ms"`
	Burst      int64  `json:"burst"`
	Capacity   int64  `json:"capacity"`
}

type setRateOut struct {
	Name   string    `json:"name"`
	Set    bool      `json:"set"`
	Reset  bool      `json:"reset"`
	Config configOut `json:"config"`
}

type setRateMismatchOut struct {
	Name      string    `json:"name"`
	Set       bool      `json:"set"`
	Reset     bool      `json:"reset"`
	Config    configOut `json:"config"`
	Mismatch  bool      `json:"mismatch"`
	Requested configOut `json:"requested"`
	Error     string    `json:"error"`
}

type acquireOut struct {
	Name         string `json:"name"`
	Permits      int64  `json:"permits"`
	Allowed      bool   `json:"allowed"`
	Remaining    int64  `json:"remaining"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	WaitedMS     int64  `json:"waited_ms"`
	At           string `json:"at"`
	Client       string `json:"client"`
}

type getOut struct {
	Name      string    `json:"name"`
	Config    configOut `json:"config"`
	Available int64     `json:"available"`
}

type deleteOut struct {
	Name    string `json:"name"`
	Existed bool   `json:"existed"`
}

type demoOut struct {
	Name    string    `json:"name"`
	Callers int       `json:"callers"`
	Permits int64     `json:"permits"`
	Config  configOut `json:"config"`
	Grants  []struct {
		Caller   int   `json:"caller"`
		AtMS     int64 `json:"at_ms"`
		WaitedMS int64 `json:"waited_ms"`
	} `json:"grants"`
	ElapsedMS int64 `json:"elapsed_ms"`
}

// decodeOne decodes stdout, which must be exactly one JSON object on one
// line, into v, rejecting unknown fields.
func decodeOne(t *testing.T, stdout string, v any) {
	t.Helper()
	if strings.Count(stdout, "\n") != 1 || !strings.HasSuffix(stdout, "\n") {
		t.Fatalf("stdout %q: want one line of JSON", stdout)
	}
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decoding %q: %v", stdout, err)
	}
}
