package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/memstore"
)

// Every run closes its Redis client and waits for its callers.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is the fake clocks' start.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

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
	stderr syncBuffer
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
	var stdout, stderr syncBuffer
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
		{name: "memory", deps: deps{Clock: memClock, MemStore: memstore.New(memstore.WithClock(memClock))}, fake: memClock},
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

func TestCommands(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const cfg = "2 per 1h0m0s (sliding-log, overall)"
			runSteps(t, b, []step{
				{args: []string{"get", "api"}, code: 2, stderr: `redlimit get: limiter "api" not initialized: run set-rate first`},
				{args: []string{"acquire", "api"}, code: 2, stderr: `limiter "api" not initialized: run set-rate first, or pass --rate and --interval`},
				{args: []string{"set-rate", "api", "--rate", "2", "--interval", "1h"}, stdout: `set "api": ` + cfg + "\n"},
				{args: []string{"acquire", "api"}, stdout: `granted 1 permit of "api": 1 remaining` + "\n"},
				{args: []string{"acquire", "--permits", "1", "api"}, stdout: `granted 1 permit of "api": 0 remaining` + "\n"},
				{args: []string{"acquire", "api"}, code: 1, stdout: `refused 1 permit of "api": 0 remaining, retry after 1h0m0s` + "\n"},
				{args: []string{"get", "api"}, stdout: "name:      \"api\"\nconfig:    " + cfg + "\navailable: 0 permits\n"},
				{args: []string{"set-rate", "api", "--try", "--rate", "2", "--interval", "1h"}, stdout: `unchanged "api": ` + cfg + " is set already\n"},
				{args: []string{"set-rate", "api", "--try", "--rate", "3", "--interval", "1h"}, code: 2, stderr: "redlimit set-rate: a different config is stored: 2 per 1h0m0s"},
				// SetRate keeps the permits granted: one more of 3.
				{args: []string{"set-rate", "api", "--rate", "3", "--interval", "1h"}, stdout: `set "api": 3 per 1h0m0s (sliding-log, overall)` + "\n"},
				{args: []string{"get", "api"}, stdout: "name:      \"api\"\nconfig:    3 per 1h0m0s (sliding-log, overall)\navailable: 1 permit\n"},
				{args: []string{"acquire", "api", "--permits", "4"}, code: 2, stderr: `redlimit acquire: invalid permits "4": exceed`},
				{args: []string{"acquire", "api", "--permits", "2"}, code: 1, stdout: `refused 2 permits of "api": 1 remaining, retry after 1h0m0s` + "\n"},
				{args: []string{"set-rate", "--reset", "api", "--rate", "3", "--interval", "1h"}, stdout: `set "api": 3 per 1h0m0s (sliding-log, overall), state reset` + "\n"},
				{args: []string{"acquire", "api", "--permits", "3"}, stdout: `granted 3 permits of "api": 0 remaining` + "\n"},
				{args: []string{"delete", "api"}, stdout: `deleted "api"` + "\n"},
				{args: []string{"delete", "api"}, stdout: `"api" did not exist` + "\n"},
				{args: []string{"get", "api"}, code: 2, stderr: "not initialized: run set-rate first"},
				// A config given to acquire creates the limiter on first use.
				{args: []string{"acquire", "auto", "--rate", "1", "--interval", "1m", "--mode", "overall"}, stdout: `granted 1 permit of "auto": 0 remaining` + "\n"},
				{args: []string{"acquire", "auto"}, code: 1, stdout: `refused 1 permit of "auto": 0 remaining, retry after 1m0s` + "\n"},
				// ... and a stored config wins over it.
				{args: []string{"acquire", "auto", "--rate", "5", "--interval", "1m"}, code: 1, stdout: `refused 1 permit of "auto": 0 remaining, retry after 1m0s` + "\n"},
				{args: []string{"get", "auto"}, stdout: "name:      \"auto\"\nconfig:    1 per 1m0s (sliding-log, overall)\navailable: 0 permits\n"},
			})
		})
	}
}

// TestSetRateThenAcquire is the scenario of the brief on each store: rate 2,
// three acquires: 0, 0, 1.
func TestSetRateThenAcquire(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			if r := call(t, b.deps, b.with("set-rate", "three", "--rate", "2", "--interval", "1s")...); r.code != 0 {
				t.Fatalf("set-rate: %s", r)
			}
			var codes []int
			for range 3 {
				codes = append(codes, call(t, b.deps, b.with("acquire", "three")...).code)
			}
			if fmt.Sprint(codes) != "[0 0 1]" {
				t.Errorf("exit statuses %v, want [0 0 1]", codes)
			}
			// The interval passes: the permits are back.
			b.fake.Advance(time.Second)
			if r := call(t, b.deps, b.with("acquire", "three", "--permits", "2")...); r.code != 0 {
				t.Errorf("acquire after the interval: %s", r)
			}
		})
	}
}

func TestPerClient(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const cfg = "1 per 1h0m0s (sliding-log, per-client)"
			runSteps(t, b, []step{
				{args: []string{"set-rate", "pc", "--rate", "1", "--interval", "1h", "--mode", "per-client"}, stdout: `set "pc": ` + cfg + "\n"},
				{args: []string{"acquire", "pc", "--client", "a"}, stdout: `granted 1 permit of "pc": 0 remaining` + "\n"},
				{args: []string{"acquire", "pc", "--client", "a"}, code: 1, stdout: `refused 1 permit of "pc": 0 remaining, retry after 1h0m0s` + "\n"},
				{args: []string{"acquire", "pc", "--client", "b"}, stdout: `granted 1 permit of "pc": 0 remaining` + "\n"},
				{args: []string{"get", "pc", "--client", "a"}, stdout: "name:      \"pc\"\nconfig:    " + cfg + "\navailable: 0 permits\n"},
				// Without --client every run is a new client.
				{args: []string{"get", "pc"}, stdout: "name:      \"pc\"\nconfig:    " + cfg + "\navailable: 1 permit\n"},
				{args: []string{"acquire", "pc"}, stdout: `granted 1 permit of "pc": 0 remaining` + "\n"},
				{args: []string{"acquire", "pc", "--client", ""}, code: 2, stderr: "invalid client ID"},
			})
		})
	}
}

// TestAcquireWait: --wait blocks on the limiter's clock until the permits
// are granted, or refuses at once when they cannot be had in time.
func TestAcquireWait(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			runSteps(t, b, []step{
				{args: []string{"set-rate", "w", "--rate", "1", "--interval", "1s"}, stdout: `set "w": 1 per 1s (sliding-log, overall)` + "\n"},
				{args: []string{"acquire", "w"}, stdout: `granted 1 permit of "w": 0 remaining` + "\n"},
				{args: []string{"acquire", "w", "--wait", "999ms"}, code: 1, stdout: `refused 1 permit of "w": 0 remaining, retry after 1s` + "\n"},
			})

			var stdout syncBuffer
			g := start(t, b.deps, &stdout, b.with("acquire", "w", "--wait", "2s", "--json")...)
			g.waitForTimers(t, b.fake, 1)
			advance(t, b.fake, time.Second, 0)
			g.wait(t, b.fake)
			code, stderr := g.code, &g.stderr
			var got acquireOut
			decodeOne(t, stdout.String(), &got)
			if code != 0 || stderr.String() != "" || !got.Allowed || got.WaitedMS != 1000 || got.Remaining != 0 || got.At != t0.Add(time.Second).Format(time.RFC3339Nano) {
				t.Errorf("acquire --wait 2s: exit %d, %+v, stderr %q; want granted after 1000ms at %s", code, got, stderr.String(), t0.Add(time.Second))
			}
		})
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

type acquireOut struct {
	Name         string `json:"name"`
	Permits      int64  `json:"permits"`
	Allowed      bool   `json:"allowed"`
	Remaining    int64  `json:"remaining"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	WaitedMS     int64  `json:"waited_ms"`
	At           string `json:"at"`
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

func TestJSON(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			jsonCall := func(v any, wantCode int, args ...string) {
				t.Helper()
				r := call(t, b.deps, b.with(append(args, "--json")...)...)
				if r.code != wantCode || r.stderr != "" {
					t.Fatalf("redlimit %s --json: %s; want exit %d", strings.Join(args, " "), r, wantCode)
				}
				decodeOne(t, r.stdout, v)
			}
			hour := configOut{Algorithm: "sliding-log", Mode: "overall", Rate: 2, Interval: "1h0m0s", IntervalMS: 3600000}

			var set setRateOut
			jsonCall(&set, 0, "set-rate", "j", "--rate", "2", "--interval", "1h")
			if want := (setRateOut{Name: "j", Set: true, Config: hour}); set != want {
				t.Errorf("set-rate: %+v, want %+v", set, want)
			}
			jsonCall(&set, 0, "set-rate", "j", "--rate", "2", "--interval", "1h", "--try")
			if want := (setRateOut{Name: "j", Set: false, Config: hour}); set != want {
				t.Errorf("set-rate --try: %+v, want %+v", set, want)
			}

			var acq acquireOut
			jsonCall(&acq, 0, "acquire", "j", "--permits", "2")
			if want := (acquireOut{Name: "j", Permits: 2, Allowed: true, Remaining: 0, At: t0.Format(time.RFC3339Nano)}); acq != want {
				t.Errorf("acquire: %+v, want %+v", acq, want)
			}
			b.fake.Advance(time.Minute)
			acq = acquireOut{}
			jsonCall(&acq, 1, "acquire", "j")
			if want := (acquireOut{Name: "j", Permits: 1, Allowed: false, Remaining: 0, RetryAfterMS: 59 * 60000}); acq != want {
				t.Errorf("acquire refused: %+v, want %+v", acq, want)
			}

			var got getOut
			jsonCall(&got, 0, "get", "j")
			if want := (getOut{Name: "j", Config: hour, Available: 0}); got != want {
				t.Errorf("get: %+v, want %+v", got, want)
			}

			var del deleteOut
			jsonCall(&del, 0, "delete", "j")
			if want := (deleteOut{Name: "j", Existed: true}); del != want {
				t.Errorf("delete: %+v, want %+v", del, want)
			}
			jsonCall(&del, 0, "delete", "j")
			if want := (deleteOut{Name: "j", Existed: false}); del != want {
				t.Errorf("delete again: %+v, want %+v", del, want)
			}

			// Errors are text on stderr, with nothing on stdout.
			if r := call(t, b.deps, b.with("get", "j", "--json")...); r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, "not initialized") {
				t.Errorf("get --json of a deleted limiter: %s", r)
			}
		})
	}
}

// TestMemoryStoreIsPerProcess: without a shared store each run is a fresh
// process with a fresh memory store, as the command is from the shell.
func TestMemoryStoreIsPerProcess(t *testing.T) {
	fake := clock.NewFake(t0)
	d := deps{Clock: fake}
	for i := range 2 {
		if r := call(t, d, "acquire", "m", "--rate", "1", "--interval", "1h"); r.code != 0 {
			t.Errorf("acquire %d with a config in a fresh memory store: %s", i, r)
		}
	}
	if r := call(t, d, "set-rate", "m", "--rate", "1", "--interval", "1h"); r.code != 0 {
		t.Errorf("set-rate: %s", r)
	}
	if r := call(t, d, "get", "m"); r.code != 2 || !strings.Contains(r.stderr, "not initialized: run set-rate first") {
		t.Errorf("get in a fresh memory store: %s", r)
	}
}

// TestRealClock runs on the real clock, Redis reading its own TIME.
func TestRealClock(t *testing.T) {
	srv := redistest.Start(t)
	steps := []step{
		{args: []string{"set-rate", "real", "--rate", "1", "--interval", "1h"}, stdout: `set "real": 1 per 1h0m0s (sliding-log, overall)` + "\n"},
		{args: []string{"acquire", "real"}, stdout: `granted 1 permit of "real": 0 remaining` + "\n"},
	}
	runSteps(t, backend{args: []string{"--redis", srv.URL()}}, steps)
	r := call(t, deps{}, "acquire", "real", "--redis", srv.URL())
	if r.code != 1 || !strings.HasPrefix(r.stdout, `refused 1 permit of "real": 0 remaining, retry after `) {
		t.Errorf("acquire: %s; want refused", r)
	}

	// The demo on the real clock, in memory and on Redis TIME, kept short.
	// Times are not asserted.
	grant := regexp.MustCompile(`^caller 0[1-3] granted at \+\d+\.\d{3}s \(waited \d+\.\d{3}s\)$`)
	for _, extra := range [][]string{nil, {"--redis", srv.URL()}} {
		r = call(t, deps{}, append([]string{"demo", "--callers", "3", "--interval", "1ms"}, extra...)...)
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		if r.code != 0 || len(lines) != 4 || !grant.MatchString(lines[0]) || !grant.MatchString(lines[2]) ||
			!regexp.MustCompile(`^3 callers, 1 per 1ms: all granted in \d+\.\ds$`).MatchString(lines[3]) {
			t.Errorf("demo %q: %s", extra, r)
		}
	}
}

// TestRedisURLFromEnv: $REDIS_URL is the default of --redis, and an empty
// --redis overrides it with the memory store.
func TestRedisURLFromEnv(t *testing.T) {
	srv := redistest.Start(t)
	fake := clock.NewFake(t0)
	d := deps{Clock: fake, LookupEnv: func(k string) (string, bool) {
		if k == "REDIS_URL" {
			return srv.URL(), true
		}
		return "", false
	}}
	if r := call(t, d, "set-rate", "env", "--rate", "1", "--interval", "1s"); r.code != 0 {
		t.Fatalf("set-rate: %s", r)
	}
	if r := call(t, d, "get", "env"); r.code != 0 || !strings.Contains(r.stdout, "1 per 1s") {
		t.Errorf("get through $REDIS_URL: %s", r)
	}
	if r := call(t, d, "get", "env", "--redis", ""); r.code != 2 || !strings.Contains(r.stderr, "not initialized") {
		t.Errorf("get --redis '': %s; want the (empty) memory store", r)
	}
	// Another prefix is another namespace.
	if r := call(t, d, "get", "env", "--prefix", "other:"); r.code != 2 || !strings.Contains(r.stderr, "not initialized") {
		t.Errorf("get --prefix other: %s; want nothing there", r)
	}
	if v, err := srv.Client(t).Exists(context.Background(), "redlimit:{env}").Result(); err != nil || v != 1 {
		t.Errorf("key redlimit:{env}: exists %d, %v; want the default prefix", v, err)
	}
}

func TestBadInput(t *testing.T) {
	d := deps{Clock: clock.NewFake(t0)}
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{nil, "Usage:\n  redlimit demo"},
		{[]string{"-h"}, "Usage:\n  redlimit demo"},
		{[]string{"frobnicate"}, `redlimit: unknown command "frobnicate"`},
		{[]string{"acquire"}, "redlimit acquire: missing NAME"},
		{[]string{"get", "--json"}, "redlimit get: missing NAME"},
		{[]string{"delete"}, "redlimit delete: missing NAME"},
		{[]string{"set-rate", "--rate", "1", "--interval", "1s"}, "redlimit set-rate: missing NAME"},
		{[]string{"acquire", "a", "b"}, `redlimit acquire: unexpected argument "b"`},
		{[]string{"demo", "extra"}, `redlimit demo: unexpected argument "extra"`},
		{[]string{"acquire", "-h"}, "usage: redlimit acquire NAME"},
		{[]string{"acquire", "x", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"acquire", "x", "--permits", "0", "--rate", "1", "--interval", "1s"}, `redlimit acquire: invalid permits "0": must be at least 1`},
		{[]string{"acquire", "x", "--permits", "-3"}, `invalid permits "-3": must be at least 1`},
		{[]string{"acquire", "x", "--permits", "two"}, `invalid value "two" for flag -permits`},
		{[]string{"acquire", "x", "--wait", "-1s"}, "redlimit acquire: invalid --wait -1s: must not be negative"},
		{[]string{"acquire", "x", "--wait", "soon"}, `invalid value "soon" for flag -wait`},
		{[]string{"acquire", "x", "--rate", "1"}, "--rate and --interval go together"},
		{[]string{"acquire", "x", "--mode", "per-client"}, "--rate and --interval go together"},
		{[]string{"acquire", "x", "--rate", "1", "--interval", "1s", "--mode", "sideways"}, `invalid mode "sideways": must be "overall" or "per-client"`},
		{[]string{"set-rate", "x", "--rate", "0", "--interval", "1s"}, `redlimit set-rate: invalid rate "0"`},
		{[]string{"set-rate", "x", "--rate", "-1", "--interval", "1s"}, `invalid rate "-1"`},
		{[]string{"set-rate", "x", "--rate", "1"}, "--rate and --interval are required"},
		{[]string{"set-rate", "x", "--interval", "1s"}, "--rate and --interval are required"},
		{[]string{"set-rate", "x", "--rate", "1", "--interval", "0s"}, `invalid interval "0s": must be at least 1ms`},
		{[]string{"set-rate", "x", "--rate", "1", "--interval", "1500us"}, "must be a whole number of milliseconds"},
		{[]string{"set-rate", "x", "--rate", "1", "--interval", "abc"}, `invalid value "abc" for flag -interval`},
		{[]string{"set-rate", "x", "--rate", "1", "--interval", "1s", "--mode", "sideways"}, `invalid mode "sideways"`},
		{[]string{"set-rate", "x", "--rate", "1", "--interval", "1s", "--reset", "--try"}, "--reset and --try cannot be combined"},
		{[]string{"get", ""}, "redlimit get: invalid name: must not be empty"},
		{[]string{"get", "x", "--redis", "http://localhost"}, "redlimit get: invalid redis URL"},
		{[]string{"demo", "--callers", "0"}, "invalid --callers 0"},
		{[]string{"demo", "--rate", "0"}, `invalid rate "0"`},
		{[]string{"demo", "--permits", "2"}, "invalid --permits 2: must be 1..1 (the rate)"},
		{[]string{"demo", "--permits", "0"}, "invalid --permits 0"},
		{[]string{"demo", "--interval", "-1s"}, `invalid interval "-1s"`},
	} {
		r := call(t, d, tc.args...)
		if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, tc.stderr) {
			t.Errorf("redlimit %q: %s; want exit 2, nothing on stdout, %q on stderr", tc.args, r, tc.stderr)
		}
	}
}

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
				if m == nil || m[2] != want || m[3] != want || seen[m[1]] {
					t.Fatalf("grant %d: %q; want a new caller granted at +%ss (waited %ss)", k, line, want, want)
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
	var stdout syncBuffer
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
					if g.AtMS != int64(k)*1000 || g.WaitedMS != g.AtMS || g.Caller < 1 || g.Caller > 5 || seen[g.Caller] {
						t.Errorf("run %d: grant %d: %+v; want a new caller at %dms", run, k, g, k*1000)
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
