package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/internal/syncbuf"
)

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
				{args: []string{"acquire", "auto", "--rate", "5", "--interval", "1m"}, code: 1, stdout: `refused 1 permit of "auto": 0 remaining, retry after 1m0s` + "\n",
					stderr: "redlimit acquire: note: stored config 1 per 1m0s (sliding-log, overall) is in force; --rate 5 --interval 1m0s were not applied; use set-rate to change it\n"},
				// The same limit asked for again is no news.
				{args: []string{"acquire", "auto", "--rate", "1", "--per", "minute"}, code: 1, stdout: `refused 1 permit of "auto": 0 remaining, retry after 1m0s` + "\n"},
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
				{args: []string{"get", "pc"}, stdout: "name:      \"pc\"\nconfig:    " + cfg + "\navailable: 1 permit\n",
					stderr: `redlimit get: note: "pc" is per-client and no --client was given: used a fresh client ID, "`},
				{args: []string{"acquire", "pc"}, stdout: `granted 1 permit of "pc": 0 remaining` + "\n",
					stderr: `redlimit acquire: note: "pc" is per-client and no --client was given: used a fresh client ID, "`},
				{args: []string{"acquire", "pc", "--client", ""}, code: 2, stderr: "invalid client ID"},
			})
		})
	}
}

// TestAcquireFreshClient: acquire on a per-client limiter without --client
// names the fresh client ID it used, which is then that client's.
func TestAcquireFreshClient(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			if r := call(t, b.deps, b.with("set-rate", "fresh", "--rate", "1", "--per", "hour", "--mode", "per-client")...); r.code != exitOK {
				t.Fatalf("set-rate: %s", r)
			}
			r := call(t, b.deps, b.with("acquire", "fresh")...)
			m := regexp.MustCompile(`^redlimit acquire: note: "fresh" is per-client and no --client was given: used a fresh client ID, "([^"]+)" \(pass --client ID to be the same client again\)\n$`).FindStringSubmatch(r.stderr)
			if r.code != exitOK || m == nil {
				t.Fatalf("acquire without --client: %s", r)
			}
			// That client has had its permit; the next fresh one has its own.
			runSteps(t, b, []step{
				{args: []string{"acquire", "fresh", "--client", m[1]}, code: 1, stdout: `refused 1 permit of "fresh": 0 remaining, retry after 1h0m0s` + "\n"},
				{args: []string{"get", "fresh", "--client", m[1]}, stdout: "name:      \"fresh\"\nconfig:    1 per 1h0m0s (sliding-log, per-client)\navailable: 0 permits\n"},
			})
			r = call(t, b.deps, b.with("acquire", "fresh", "--json")...)
			var out acquireOut
			decodeOne(t, r.stdout, &out)
			if r.code != exitOK || out.Client == "" || out.Client == m[1] || !strings.Contains(r.stderr, `used a fresh client ID, "`+out.Client+`"`) {
				t.Errorf("acquire --json without --client: %s: %+v; want the new client's ID in both", r, out)
			}
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

			var stdout syncbuf.Buffer
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

			// A different config stored: JSON all the same, naming both,
			// with the error on stderr and exit status 2.
			r := call(t, b.deps, b.with("set-rate", "j", "--rate", "3", "--per", "minute", "--try", "--json")...)
			var mis setRateMismatchOut
			decodeOne(t, r.stdout, &mis)
			want := setRateMismatchOut{Name: "j", Config: hour, Mismatch: true,
				Requested: configOut{Algorithm: "sliding-log", Mode: "overall", Rate: 3, Interval: "1m0s", IntervalMS: 60000},
				Error:     "a different config is stored: 2 per 1h0m0s (sliding-log, overall) (requested 3 per 1m0s (sliding-log, overall))"}
			if r.code != exitError || mis != want || r.stderr != "redlimit set-rate: "+want.Error+"\n" {
				t.Errorf("set-rate --try --json, another config stored: %s: %+v, want %+v", r, mis, want)
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
	// Each command that keeps or reads a limiter says that the memory store
	// is gone when it ends; the demo, which lives within one run, does not.
	const note = ": note: without --redis the limiter lives in memory for this one command only: " +
		"no earlier run's state is here and none is kept (give --redis URL or $REDIS_URL to share it)\n"
	for _, args := range [][]string{
		{"set-rate", "m", "--rate", "1", "--interval", "1h"},
		{"get", "m"},
		{"acquire", "m"},
		{"acquire", "m", "--rate", "1", "--interval", "1h"},
		{"delete", "m"},
	} {
		if r := call(t, d, args...); !strings.HasPrefix(r.stderr, "redlimit "+args[0]+note) {
			t.Errorf("redlimit %q in memory: %s; want the note first on stderr", args, r)
		}
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
		{[]string{"frobnicate"}, `redlimit: unknown command "frobnicate"`},
		{[]string{"acquire"}, "redlimit acquire: missing NAME"},
		{[]string{"get", "--json"}, "redlimit get: missing NAME"},
		{[]string{"delete"}, "redlimit delete: missing NAME"},
		{[]string{"set-rate", "--rate", "1", "--interval", "1s"}, "redlimit set-rate: missing NAME"},
		{[]string{"acquire", "a", "b"}, `redlimit acquire: unexpected argument "b"`},
		{[]string{"demo", "extra"}, `redlimit demo: unexpected argument "extra"`},
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
		// One line, and for a usage error a second saying where the usage
		// is: not a page of help (but for no command at all).
		if n := strings.Count(r.stderr, "\n"); tc.args != nil && n > 2 {
			t.Errorf("redlimit %q: %d lines on stderr, want at most 2:\n%s", tc.args, n, r.stderr)
		}
	}
}
