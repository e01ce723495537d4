package main

import (
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/syncbuf"
)

// TestKeyedCommands: set-rate --limit stores a policy of several limits;
// acquire --key charges each key on all of them, refusing with the limit
// that refused; get shows the limits, and with --key a key's state.
func TestKeyedCommands(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			runSteps(t, b, []step{
				{args: []string{"get", "api", "--key", "alice"}, code: 2, stderr: `redlimit get: policy "api" not initialized: run set-rate api --limit RATE/INTERVAL[,algorithm=A][,burst=N][,capacity=N] first` + "\n"},
				{args: []string{"acquire", "api", "--key", "alice"}, code: 2, stderr: `policy "api" not initialized: run set-rate api --limit RATE/INTERVAL[,algorithm=A][,burst=N][,capacity=N] first, or pass --limit`},
				{args: []string{"set-rate", "api", "--limit", "2/1s", "--limit", "3/1h"}, stdout: `set policy "api": 2/1s and 3/1h` + "\n"},
				{args: []string{"get", "api"}, stdout: "name:      \"api\"\npolicy:    2/1s\n           3/1h\n"},
				{args: []string{"acquire", "api", "--key", "alice"}, stdout: `granted 1 permit of "api" for key "alice": 1 remaining` + "\n"},
				{args: []string{"acquire", "--key", "alice", "api"}, stdout: `granted 1 permit of "api" for key "alice": 0 remaining` + "\n"},
				// The second-long limit refuses; the hour's is charged nothing.
				{args: []string{"acquire", "api", "--key", "alice"}, code: 1, stdout: `refused 1 permit of "api" for key "alice": 0 remaining, retry after 1s (limit 2/1s)` + "\n"},
				{args: []string{"get", "api", "--key", "alice"}, stdout: "name:      \"api\"\nkey:       \"alice\"\navailable: 0 permits\n" +
					"policy:    2/1s  0 remaining, reset after 1s\n           3/1h  1 remaining, reset after 1h0m0s\n"},
				// Another key has its own state.
				{args: []string{"get", "api", "--key", "bob"}, stdout: "name:      \"api\"\nkey:       \"bob\"\navailable: 2 permits\n" +
					"policy:    2/1s  2 remaining, reset after 0s\n           3/1h  3 remaining, reset after 0s\n"},
				{args: []string{"acquire", "api", "--key", "bob", "--permits", "2"}, stdout: `granted 2 permits of "api" for key "bob": 0 remaining` + "\n"},
				{args: []string{"acquire", "api", "--key", "alice", "--permits", "3"}, code: 2, stderr: `redlimit acquire: invalid permits "3": exceed`},
				{args: []string{"set-rate", "api", "--try", "--limit", "2/1s", "--limit", "3/1h"}, stdout: `unchanged policy "api": 2/1s and 3/1h is set already` + "\n"},
				{args: []string{"set-rate", "api", "--try", "--limit", "5/1s"}, code: 2, stderr: "redlimit set-rate: a different policy is stored: 2/1s and 3/1h (requested 5/1s)\n"},
			})
			// A second on, the hour's limit is the one that refuses.
			b.fake.Advance(time.Second)
			runSteps(t, b, []step{
				{args: []string{"acquire", "api", "--key", "alice"}, stdout: `granted 1 permit of "api" for key "alice": 0 remaining` + "\n"},
				{args: []string{"acquire", "api", "--key", "alice"}, code: 1, stdout: `refused 1 permit of "api" for key "alice": 0 remaining, retry after 59m59s (limit 3/1h)` + "\n"},
				// SetLimits keeps what each key was granted: 3 of 5 this hour.
				{args: []string{"set-rate", "api", "--limit", "2/1s", "--limit", "5/1h"}, stdout: `set policy "api": 2/1s and 5/1h` + "\n"},
				{args: []string{"acquire", "api", "--key", "alice", "--permits", "2"}, code: 1, stdout: `refused 2 permits of "api" for key "alice": 1 remaining, retry after 1s (limit 2/1s)` + "\n"},
				{args: []string{"acquire", "api", "--key", "alice"}, stdout: `granted 1 permit of "api" for key "alice": 0 remaining` + "\n"},
				// --reset starts every key afresh; --algorithm is the limits' default.
				{args: []string{"set-rate", "api", "--reset", "--limit", "2/1s,burst=4", "--algorithm", "token-bucket"}, stdout: `set policy "api": 2/1s,token-bucket,burst=4, state reset` + "\n"},
				{args: []string{"acquire", "api", "--key", "alice", "--permits", "4"}, stdout: `granted 4 permits of "api" for key "alice": 0 remaining` + "\n"},
				{args: []string{"set-rate", "mixed", "--limit", "10/1s", "--limit", "100/1h,algorithm=fixed-window", "--algorithm", "leaky-bucket"}, stdout: `set policy "mixed": 10/1s,leaky-bucket and 100/1h,fixed-window` + "\n"},
				// A limiter and a policy may share a name: get shows both.
				{args: []string{"set-rate", "api", "--rate", "1", "--interval", "1h"}, stdout: `set "api": 1 per 1h0m0s (sliding-log, overall)` + "\n"},
				{args: []string{"get", "api"}, stdout: "name:      \"api\"\nconfig:    1 per 1h0m0s (sliding-log, overall)\navailable: 1 permit\npolicy:    2/1s,token-bucket,burst=4\n"},
				// delete removes both.
				{args: []string{"delete", "api"}, stdout: `deleted "api"` + "\n"},
				{args: []string{"get", "api"}, code: 2, stderr: `limiter "api" not initialized`},
				{args: []string{"get", "api", "--key", "alice"}, code: 2, stderr: `policy "api" not initialized`},
				// --limit on acquire stores the policy on first use; a stored one wins.
				{args: []string{"acquire", "auto", "--key", "k", "--limit", "1/1m"}, stdout: `granted 1 permit of "auto" for key "k": 0 remaining` + "\n"},
				{args: []string{"acquire", "auto", "--key", "k"}, code: 1, stdout: `refused 1 permit of "auto" for key "k": 0 remaining, retry after 1m0s` + "\n"},
				{args: []string{"acquire", "auto", "--key", "k", "--limit", "5/1m"}, code: 1, stdout: `refused 1 permit of "auto" for key "k": 0 remaining, retry after 1m0s` + "\n",
					stderr: "redlimit acquire: note: stored policy 1/1m is in force; --limit 5/1m not applied; use set-rate to change it\n"},
				{args: []string{"acquire", "auto", "--key", "k", "--limit", "1/1m"}, code: 1, stdout: `refused 1 permit of "auto" for key "k": 0 remaining, retry after 1m0s` + "\n"},
			})
		})
	}
}

// TestKeyedWait: acquire --key --wait waits on the clock for a grant, on
// one limit (a reservation) and on several (the latest retry-after, then
// again), or refuses at once when the permits cannot be had in time.
func TestKeyedWait(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			runSteps(t, b, []step{
				{args: []string{"set-rate", "one", "--limit", "1/1s"}, stdout: `set policy "one": 1/1s` + "\n"},
				{args: []string{"set-rate", "two", "--limit", "1/1s", "--limit", "10/1h"}, stdout: `set policy "two": 1/1s and 10/1h` + "\n"},
				{args: []string{"acquire", "one", "--key", "k"}, stdout: `granted 1 permit of "one" for key "k": 0 remaining` + "\n"},
				{args: []string{"acquire", "two", "--key", "k"}, stdout: `granted 1 permit of "two" for key "k": 0 remaining` + "\n"},
				{args: []string{"acquire", "one", "--key", "k", "--wait", "999ms"}, code: 1, stdout: `refused 1 permit of "one" for key "k": 0 remaining, retry after 1s` + "\n"},
				{args: []string{"acquire", "two", "--key", "k", "--wait", "999ms"}, code: 1, stdout: `refused 1 permit of "two" for key "k": 0 remaining, retry after 1s (limit 1/1s)` + "\n"},
			})
			for _, name := range []string{"one", "two"} {
				// A key granted its permit now waits a second for the next.
				if r := call(t, b.deps, b.with("acquire", name, "--key", "w")...); r.code != exitOK {
					t.Fatalf("acquire %s --key w: %s", name, r)
				}
				var stdout syncbuf.Buffer
				g := start(t, b.deps, &stdout, b.with("acquire", name, "--key", "w", "--wait", "2s")...)
				if !b.fake.WaitForTimers(1, g.done) {
					t.Fatalf("%s: ended before waiting: exit %d, stdout %q", name, g.code, stdout.String())
				}
				advance(t, b.fake, time.Second, 0)
				g.wait(t, b.fake)
				want := `granted 1 permit of "` + name + `" for key "w" after waiting 1s: 0 remaining` + "\n"
				ok := stdout.String() == want
				if name == "two" {
					// Granted when asked again after the wait (the Result
					// does not count that wait as Waited).
					want = `granted 1 permit of "two" for key "w"`
					ok = strings.HasPrefix(stdout.String(), want) && strings.HasSuffix(stdout.String(), ": 0 remaining\n")
				}
				if g.code != exitOK || !ok || g.stderr.String() != "" {
					t.Errorf("acquire %s --key w --wait 2s: exit %d, stdout %q, stderr %q; want %q", name, g.code, stdout.String(), g.stderr.String(), want)
				}
			}
		})
	}
}

// keyedAcquireOut is "acquire --key --json".
type keyedAcquireOut struct {
	Name         string           `json:"name"`
	Key          string           `json:"key"`
	Permits      int64            `json:"permits"`
	Allowed      bool             `json:"allowed"`
	Remaining    int64            `json:"remaining"`
	RetryAfterMS int64            `json:"retry_after_ms"`
	WaitedMS     int64            `json:"waited_ms"`
	At           string           `json:"at"`
	RefusedBy    string           `json:"refused_by"`
	Limits       []limitStatusOut `json:"limits"`
}

type limitOut struct {
	Limit      string `json:"limit"`
	Algorithm  string `json:"algorithm"`
	Rate       int64  `json:"rate"`
	Interval   string `json:"interval"`
	IntervalMS int64  `json:"interval_ms"`
	Burst      int64  `json:"burst"`
	Capacity   int64  `json:"capacity"`
}

type limitStatusOut struct {
	limitOut
	Remaining    int64 `json:"remaining"`
	ResetAfterMS int64 `json:"reset_after_ms"`
	RetryAfterMS int64 `json:"retry_after_ms"`
	Refused      bool  `json:"refused"`
}

// TestKeyedJSON: the keyed forms' --json, one object each.
func TestKeyedJSON(t *testing.T) {
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
			second := limitOut{Limit: "2/1s", Algorithm: "sliding-log", Rate: 2, Interval: "1s", IntervalMS: 1000}
			bucket := limitOut{Limit: "10/1h,token-bucket,burst=20", Algorithm: "token-bucket", Rate: 10, Interval: "1h0m0s", IntervalMS: 3600000, Burst: 20}

			var set struct {
				Name   string     `json:"name"`
				Set    bool       `json:"set"`
				Reset  bool       `json:"reset"`
				Limits []limitOut `json:"limits"`
			}
			jsonCall(&set, 0, "set-rate", "j", "--limit", "2/1s", "--limit", "10/1h,algorithm=token-bucket,burst=20")
			if !set.Set || set.Reset || set.Name != "j" || len(set.Limits) != 2 || set.Limits[0] != second || set.Limits[1] != bucket {
				t.Errorf("set-rate --limit --json: %+v", set)
			}

			var got struct {
				Name   string     `json:"name"`
				Limits []limitOut `json:"limits"`
			}
			jsonCall(&got, 0, "get", "j")
			if got.Name != "j" || len(got.Limits) != 2 || got.Limits[0] != second || got.Limits[1] != bucket {
				t.Errorf("get --json: %+v", got)
			}

			var acq keyedAcquireOut
			jsonCall(&acq, 0, "acquire", "j", "--key", "u1", "--permits", "2")
			if !acq.Allowed || acq.Key != "u1" || acq.Permits != 2 || acq.Remaining != 0 || acq.At != t0.Format(time.RFC3339Nano) || acq.RefusedBy != "" ||
				len(acq.Limits) != 2 || acq.Limits[0].limitOut != second || acq.Limits[0].Remaining != 0 || acq.Limits[1].Remaining != 18 {
				t.Errorf("acquire --key --json: %+v", acq)
			}
			acq = keyedAcquireOut{}
			jsonCall(&acq, 1, "acquire", "j", "--key", "u1")
			if acq.Allowed || acq.RefusedBy != "2/1s" || acq.RetryAfterMS != 1000 || acq.At != "" ||
				len(acq.Limits) != 2 || !acq.Limits[0].Refused || acq.Limits[0].RetryAfterMS != 1000 || acq.Limits[1].Refused || acq.Limits[1].RetryAfterMS != 0 {
				t.Errorf("acquire --key --json, refused: %+v", acq)
			}

			var st struct {
				Name         string           `json:"name"`
				Key          string           `json:"key"`
				Available    int64            `json:"available"`
				RetryAfterMS int64            `json:"retry_after_ms"`
				Limits       []limitStatusOut `json:"limits"`
			}
			jsonCall(&st, 0, "get", "j", "--key", "u1")
			if st.Key != "u1" || st.Available != 0 || len(st.Limits) != 2 || st.Limits[0].Remaining != 0 || st.Limits[0].ResetAfterMS != 1000 ||
				st.Limits[1].limitOut != bucket || st.Limits[1].Remaining != 18 {
				t.Errorf("get --key --json: %+v", st)
			}
		})
	}
}

// TestKeyedBadInput: bad --limit and --key input is a one-line error and
// exit status 2, never a panic; mixing the forms is a usage error.
func TestKeyedBadInput(t *testing.T) {
	d := deps{Clock: clock.NewFake(t0)}
	many := []string{"set-rate", "x"}
	for range redlimit.MaxLimits + 1 {
		many = append(many, "--limit", "1/1s")
	}
	for _, tc := range []struct {
		args   []string
		stderr string
		usage  bool // a usage error: the second line says where the usage is
	}{
		{[]string{"set-rate", "x", "--limit", "10"}, `redlimit set-rate: invalid limit "10": must be RATE/INTERVAL[,algorithm=A][,burst=N][,capacity=N], e.g. 10/1s`, false},
		{[]string{"set-rate", "x", "--limit", "ten/1s"}, `invalid limit "ten/1s": the rate must be a whole number`, false},
		{[]string{"set-rate", "x", "--limit", "10/soon"}, `invalid limit "10/soon": the interval must be a Go duration`, false},
		{[]string{"set-rate", "x", "--limit", "10/1s,color=red"}, `unknown option "color"`, false},
		{[]string{"set-rate", "x", "--limit", "10/1s,burst=2,burst=3"}, `must be given once`, false},
		{[]string{"set-rate", "x", "--limit", "10/1s,burst=0,algorithm=token-bucket"}, `burst must be a whole number of at least 1`, false},
		{[]string{"set-rate", "x", "--limit", "10/1s,algorithm=bogus"}, `invalid algorithm "bogus"`, false},
		{[]string{"set-rate", "x", "--limit", "0/1s"}, `redlimit set-rate: --limit 0/1s: invalid rate "0"`, false},
		{[]string{"set-rate", "x", "--limit", "1/1500us"}, "--limit 1/1500us: invalid interval", false},
		{[]string{"set-rate", "x", "--limit", "10/1s,burst=3"}, `redlimit set-rate: --limit 10/1s,burst=3: invalid burst "3": applies to token-bucket only`, false},
		{[]string{"set-rate", "x", "--limit", "10/1s,burst=3", "--algorithm", "leaky-bucket"}, `--limit 10/1s,burst=3: invalid burst "3"`, false},
		{many, "a policy has 1..16 limits", false},
		{[]string{"set-rate", "x", "--limit", "10/1s", "--rate", "3"}, "redlimit set-rate: --limit and --rate cannot be combined", true},
		{[]string{"set-rate", "x", "--limit", "10/1s", "--per", "hour"}, "--limit and --per cannot be combined", true},
		{[]string{"set-rate", "x", "--limit", "10/1s", "--burst", "3"}, "--limit and --burst cannot be combined", true},
		{[]string{"set-rate", "x", "--limit", "10/1s", "--mode", "per-client"}, "--limit and --mode cannot be combined", true},
		{[]string{"set-rate", "x", "--limit", "10/1s", "--reset", "--try"}, "--reset and --try cannot be combined", true},
		{[]string{"set-rate", "--limit", "10/1s"}, "redlimit set-rate: missing NAME", true},
		{[]string{"acquire", "x", "--limit", "1/1s"}, "redlimit acquire: --limit needs --key", true},
		{[]string{"acquire", "x", "--key", "k", "--client", "c"}, "--key and --client cannot be combined", true},
		{[]string{"acquire", "x", "--key", "k", "--rate", "1", "--interval", "1s"}, "--key and --rate cannot be combined", true},
		{[]string{"acquire", "x", "--key", "k", "--algorithm", "token-bucket"}, "--algorithm with --key is the default algorithm of --limit", true},
		{[]string{"acquire", "x", "--key", "", "--limit", "1/1s"}, "redlimit acquire: invalid key: must not be empty", false},
		{[]string{"acquire", "x", "--key", strings.Repeat("k", 1025), "--limit", "1/1s"}, "invalid key: is 1025 bytes, at most 1024 allowed", false},
		{[]string{"acquire", "x", "--key", "k", "--limit", "1/1s", "--permits", "2"}, `invalid permits "2"`, false},
		{[]string{"acquire", "x", "--key", "k", "--limit", "1/1s", "--permits", "0"}, `invalid permits "0"`, false},
		{[]string{"acquire", "x", "--key", "k", "--limit", "1/1s", "--wait", "-1s"}, "invalid --wait -1s: must not be negative", false},
		{[]string{"acquire", "", "--key", "k", "--limit", "1/1s"}, "invalid name: must not be empty", false},
		{[]string{"get", "x", "--key", "k", "--client", "c"}, "--key cannot be combined with --client", true},
		{[]string{"get", "x", "--key", "k", "--redisson"}, "--key cannot be combined with --client, --redisson", true},
		{[]string{"get", "x", "--key", "k"}, `policy "x" not initialized`, false},
		{[]string{"get", "x", "--key", ""}, "invalid key: must not be empty", false},
	} {
		r := call(t, d, tc.args...)
		if r.code != exitError || r.stdout != "" || !strings.Contains(r.stderr, tc.stderr) {
			t.Errorf("redlimit %q: %s; want exit 2, nothing on stdout, %q on stderr", tc.args, r, tc.stderr)
			continue
		}
		lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
		// The memory note may come first; then one line, and for a usage
		// error where to read the usage.
		if strings.Contains(lines[0], ": note: ") {
			lines = lines[1:]
		}
		want := 1
		if tc.usage {
			want = 2
		}
		if len(lines) != want || tc.usage && lines[1] != "run 'redlimit help "+tc.args[0]+"' for usage" {
			t.Errorf("redlimit %q: stderr %q; want %d lines", tc.args, r.stderr, want)
		}
	}
}
