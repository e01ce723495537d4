package redisstore

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/storetest"
)

var (
	logTwinTraces = flag.Int("logtwin.traces", 120, "random traces in TestSlidingLogFastPathTwins")
	logTwinSeed   = flag.Uint64("logtwin.seed", 0, "first seed of TestSlidingLogFastPathTwins (0: from the time)")
)

// slidingLogTwinScript runs one keyed call in the form ARGV[2] names
// ("main": policy_main, "batch": policy_batch), its ARGV from ARGV[3] on,
// with the sliding log's fast path on (ARGV[1] "1": reading a key's state
// by SET NX GET, whatever the keys before had; "2": by GET, as on a Redis
// without SET's NX and GET together) or off ("0"): every call then takes
// the general path. It answers the call's reply, the PTTLs of
// KEYS[1] and KEYS[2], and Redis TIME (µs) before and after the call.
const slidingLogTwinScript = `
slidinglogFast, slidinglogAdapt = ARGV[1] ~= '0', false
if ARGV[1] == '2' then slidinglogNxGet = false end
local argv = {}
for i = 3, #ARGV do argv[#argv + 1] = ARGV[i] end
local t1 = redis.call('TIME')
local r
if ARGV[2] == 'batch' then r = policy_batch(KEYS, argv) else r = policy_main(KEYS, argv) end
local s, l = redis.call('PTTL', KEYS[1]), redis.call('PTTL', KEYS[2])
local t2 = redis.call('TIME')
return {r, s, l, t1[1] * 1000000 + t1[2], t2[1] * 1000000 + t2[2]}
`

// twinRun is what slidingLogTwinScript answers of one key.
type twinRun struct {
	replies      [][]int64 // one per call, a grant at once in the general form
	ttl, listTTL int64     // ms, -2: no key
	t1, t2       int64     // µs
}

// generalForm writes a fast grant's reply {now, 1, remaining, reset} as
// the general path does: {now, 0, granted, full, refusing limit, wait,
// then the limit's remaining, reset, wait}.
func generalForm(r []int64) []int64 {
	if len(r) == 4 && r[1] == 1 {
		return []int64{r[0], 0, 1, 0, 0, 0, r[2], r[3], 0}
	}
	return r
}

// TestSlidingLogFastPathTwins runs random traces of keyed calls of a
// policy of one sliding log on twin keys, one with slidinglog_fast on and
// one with every call on the general path, and requires the same replies
// (a grant at once read in the general form), the same state string and
// list, and TTLs as the general path sets them: acquires of one or more
// permits granted at once, refused and reserved, at the newest entry's ms
// or later, with heads left the window, logs longer than the fast path
// reads at once, reservations cancelled, releases, status reads, states
// past their expiry, lists whose state is gone, policy changes keeping the
// state or resetting it; sent alone (both forms) and in batches ("="),
// the fast twin reading a key's state by SET NX GET or by GET.
func TestSlidingLogFastPathTwins(t *testing.T) {
	ctx := context.Background()
	rdb, s, script := twinSetup(t)
	seed := *logTwinSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seeds %d..%d (rerun one with -logtwin.seed=N -logtwin.traces=1)", seed, seed+uint64(*logTwinTraces)-1)
	var buf [maxKeyedNums]int64
	counts := map[string]int{}
	for trace := range *logTwinTraces {
		sd := seed + uint64(trace)
		rng := rand.New(rand.NewPCG(sd, 0x51d1))
		name := fmt.Sprintf("twin%d", trace)
		// The fast twin reads a key's state by SET NX GET, or by GET (as
		// on Redis 6) in the traces of odd seeds.
		fastForm := "1"
		if sd%2 == 1 {
			fastForm = "2"
		}
		randomLog := func() redlimit.Config {
			rate := 1 + rng.Int64N(8)
			if rng.IntN(3) == 0 {
				rate = 8 + rng.Int64N(40) // logs longer than one read
			}
			return redlimit.PerInterval(rate, time.Duration(1+rng.IntN(40))*5*time.Millisecond).WithAlgorithm(redlimit.SlidingLog)
		}
		var e *policyEntry
		setPolicy := func(how redlimit.SetMode) {
			if _, _, err := s.SetPolicy(ctx, name, redlimit.PolicyConfig{Limits: []redlimit.Config{randomLog()}}, how); err != nil {
				t.Fatal(err)
			}
			var err error
			if e, _, err = s.policyFor(ctx, name, &redlimit.PolicyConfig{}, true); err != nil {
				t.Fatal(err)
			}
		}
		setPolicy(redlimit.SetResetState)
		twins := [2][]string{
			policyStateKeys(s.prefix, redlimit.PolicyKey{Policy: name, Key: "fast"}, 1),
			policyStateKeys(s.prefix, redlimit.PolicyKey{Policy: name, Key: "general"}, 1),
		}
		now := storetest.T0.UnixMicro() + rng.Int64N(1_000_000)
		type resv struct{ at, n int64 }
		var resvs []resv
		lastWait := int64(0) // the wait of the latest refusal (µs)
		fail := func(step int, what string, a, b any) {
			t.Helper()
			t.Fatalf("seed %d step %d: %s:\nfast    %v\ngeneral %v", sd, step, what, a, b)
		}
		// run makes the call of ARGV args (ARGV[1] now left out) in form
		// on both twins; calls: how many calls the form makes.
		run := func(step int, form string, calls int, args ...any) [2]twinRun {
			t.Helper()
			var out [2]twinRun
			var before [2]string
			for i, keys := range twins {
				before[i] = rdb.Get(ctx, keys[0]).Val()
				var ks []string
				for range calls {
					ks = append(ks, keys...)
				}
				fast := "0"
				if i == 0 {
					fast = fastForm
				}
				argv := append([]any{fast, form, strconv.FormatInt(now, 10)}, args...)
				raw, err := script.Run(ctx, rdb, ks, argv...).Slice()
				if err != nil {
					t.Fatalf("seed %d step %d: %v", sd, step, err)
				}
				r := twinRun{ttl: raw[1].(int64), listTTL: raw[2].(int64), t1: raw[3].(int64), t2: raw[4].(int64)}
				add := func(_ int, text string) {
					nums, err := keyedNums(text, &buf)
					if err != nil {
						t.Fatalf("seed %d step %d: %v", sd, step, err)
					}
					r.replies = append(r.replies, generalForm(slices.Clone(nums)))
				}
				if form == "batch" {
					if err := splitKeyed(raw[0], calls, add); err != nil {
						t.Fatal(err)
					}
				} else {
					add(0, raw[0].(string))
				}
				out[i] = r
			}
			if fmt.Sprint(out[0].replies) != fmt.Sprint(out[1].replies) {
				fail(step, "replies", out[0].replies, out[1].replies)
			}
			var stored [2]string
			for i, keys := range twins {
				st, err := rdb.Get(ctx, keys[0]).Result()
				if err == redis.Nil {
					st = "(none)"
				}
				// The list is the log's where the state says so: beside
				// an inline log (or none) the fast path leaves a list
				// whose state was dropped to its TTL, unread.
				stored[i] = st
				if strings.Contains(st, "|l") {
					stored[i] += " " + fmt.Sprint(rdb.LRange(ctx, keys[1], 0, -1).Val())
					counts["list form"]++
				} else if strings.Contains(st, "|i") {
					counts["inline"]++
				}
				if st != "(none)" && st != before[i] {
					checkLogTTL(t, sd, step, st, now, e.cfg.Limits[0].Interval.Milliseconds(), out[i])
				}
			}
			if stored[0] != stored[1] {
				fail(step, "stored", stored[0], stored[1])
			}
			return out
		}
		// acquire asks for n permits, waiting up to wait (µs), in a form
		// of call taken at random: alone (both forms) or in a batch.
		acquire := func(step int, n, wait int64) {
			var out [2]twinRun
			switch rng.IntN(3) {
			case 0:
				out = run(step, "main", 1, e.callArgs(keyAcquire, n, wait, false, "", nil)[1:]...)
			case 1:
				out = run(step, "main", 1, n, wait, e.args[0].(string)+" "+e.args[1].(string), e.args[3])
			default:
				args := e.callArgs(keyAcquire, n, wait, false, "", nil)[1:]
				args = append([]any{2, len(args) + 1}, args...)
				out = run(step, "batch", 2, append(args, repeatCall)...)
			}
			for _, r := range out[0].replies {
				switch {
				case r[1] != 0:
					counts["other"]++
				case r[2] == 1 && r[5] > 0:
					counts["reserved"]++
					resvs = append(resvs, resv{now + r[5], n})
				case r[2] == 1:
					counts["granted"]++
				default:
					counts["refused"]++
					lastWait = r[5]
				}
			}
		}
		for step := range 60 {
			switch x := rng.IntN(20); {
			case x < 12:
				n := int64(1)
				if rng.IntN(3) == 0 {
					n = 1 + rng.Int64N(e.most)
				}
				wait := int64(0)
				switch rng.IntN(5) {
				case 0:
					wait = rng.Int64N(60_000)
				case 1:
					wait = -1
				case 2:
					wait = lastWait + 1000*rng.Int64N(2) - 1000*rng.Int64N(2) // at the edge
				}
				acquire(step, n, wait)
			case x < 13 && len(resvs) > 0:
				k := rng.IntN(len(resvs))
				r := resvs[k]
				resvs = slices.Delete(resvs, k, k+1)
				run(step, "main", 1, e.callArgs(keyCancel, r.n, r.at, false, "", nil)[1:]...)
				counts["cancel"]++
			case x < 14:
				run(step, "main", 1, e.callArgs(keyRelease, 1+rng.Int64N(3), 0, false, "", nil)[1:]...)
				counts["release"]++
			case x < 15:
				run(step, "main", 1, e.callArgs(keyStatus, 1, 0, false, "", nil)[1:]...)
			case x < 16 && rng.IntN(3) == 0:
				// The state gone, its list left: as after a reset of an
				// older redlimit, or an eviction.
				for _, keys := range twins {
					rdb.Del(ctx, keys[0])
				}
				counts["state dropped"]++
			case x < 17 && rng.IntN(3) == 0:
				how := redlimit.SetKeepState
				if rng.IntN(3) == 0 {
					how = redlimit.SetResetState
				}
				setPolicy(how)
				resvs = nil
				counts["policy changed"]++
			case x < 18 && rng.IntN(2) == 0:
				// A run of grants a ms or so apart: a log longer than
				// the fast path reads at once.
				for range 3 + rng.IntN(12) {
					now += 1000 + rng.Int64N(1000)
					acquire(step, 1, 0)
				}
				counts["runs"]++
			default:
				switch rng.IntN(6) {
				case 0:
					now += rng.Int64N(1000) // within the ms, or the next
				case 4:
					now += e.cfg.Limits[0].Interval.Microseconds() // an entry just left
				case 5:
					now += 1000 * (1 + rng.Int64N(5))
				case 1:
					now += rng.Int64N(300_000) // often past the window
				default:
					now += rng.Int64N(30_000)
				}
			}
		}
	}
	t.Logf("%d traces: %v", *logTwinTraces, counts)
	for _, k := range []string{"granted", "reserved", "refused", "cancel", "release", "state dropped", "policy changed", "runs", "inline", "list form"} {
		if counts[k] == 0 {
			t.Fatalf("traces missed %s", k)
		}
	}
}

// checkLogTTL checks the TTLs of a key's state st and its list after a
// call r at now (µs, injected) that wrote st: the state's expiry plus the
// minute a caller's clock adds, as set during the call (run down by at
// most the ms between the Redis TIME read before it and after the PTTLs).
// An inline log (no list) expires interval (ms) after its newest entry; a
// list at the first multiple of the interval after the state's expiry.
func checkLogTTL(t *testing.T, seed uint64, step int, st string, now, interval int64, r twinRun) {
	t.Helper()
	var expiry int64
	listTTL := true
	if _, state, ok := strings.Cut(st, "|i"); ok {
		// Last, then per entry its offset back from last and its
		// permits, but for a newest entry at last: its permits alone.
		f := strings.Fields(state)
		last, _ := strconv.ParseInt(f[0], 36, 64)
		var off int64
		if len(f)%2 == 1 {
			off, _ = strconv.ParseInt(f[len(f)-2], 36, 64)
		}
		expiry, listTTL = last-off+interval, false
	} else {
		// Last, the expiry's offset from it, the total, and the tail's
		// permits and the head's offset back from last (five numbers,
		// where the list's tail is the one the expiry tells).
		_, state, ok := strings.Cut(st, "|l")
		f := strings.Fields(state)
		if !ok || (len(f) != 3 && len(f) != 5) {
			t.Fatalf("seed %d step %d: state %q is not a sliding log's", seed, step, st)
		}
		last, _ := strconv.ParseInt(f[0], 36, 64)
		off, _ := strconv.ParseInt(f[1], 36, 64)
		expiry = last + off
	}
	elapsed := r.t2/1000 - r.t1/1000
	check := func(what string, ttl, end int64) {
		t.Helper()
		want := max((end*1000-now+999)/1000, 1) + 60000
		if ttl < want-elapsed || ttl > want {
			t.Fatalf("seed %d step %d: %s TTL %d, want %d (less at most %d ms)", seed, step, what, ttl, want, elapsed)
		}
	}
	check("state", r.ttl, expiry)
	if listTTL {
		// The list expires at the first multiple of the interval after
		// the state's expiry.
		check("list", r.listTTL, (expiry/interval+1)*interval)
	}
}

// TestSlidingLogFastSameMsTTL: on Redis's clock, acquires on one key in
// one run (one instant, so one ms) take the fast path after the first
// with the state's and the list's expiry unchanged: the TTLs stay as the
// first set them, and the state and list come out as the general path
// writes them, each key living its interval from that ms. A new key's
// log is written inline, with no list; a log longer than that keeps its
// list.
func TestSlidingLogFastSameMsTTL(t *testing.T) {
	ctx := context.Background()
	rdb, s, script := twinSetup(t)
	const name = "same-ms"
	cfg := redlimit.PerInterval(100, time.Hour).WithAlgorithm(redlimit.SlidingLog)
	if _, _, err := s.SetPolicy(ctx, name, redlimit.PolicyConfig{Limits: []redlimit.Config{cfg}}, redlimit.SetResetState); err != nil {
		t.Fatal(err)
	}
	e, _, err := s.policyFor(ctx, name, &redlimit.PolicyConfig{}, true)
	if err != nil {
		t.Fatal(err)
	}
	args := e.callArgs(keyAcquire, 1, 0, false, "", nil)[1:]
	args = append([]any{2, len(args) + 1}, args...)
	args = append(args, repeatCall, repeatCall) // three calls
	head := e.args[0].(string) + " " + e.args[1].(string) + "|"
	b36 := func(x int64) string { return strconv.FormatInt(x, 36) }
	const hour = int64(time.Hour / time.Millisecond)
	listEnd := func(expiry int64) int64 { return (expiry/hour + 1) * hour }
	for _, long := range []bool{false, true} {
		var stored [2]string
		for i, fast := range []string{"1", "0"} {
			keys := policyStateKeys(s.prefix, redlimit.PolicyKey{Policy: name, Key: fmt.Sprint("k", fast, long)}, 1)
			var t0 int64 // Redis's ms before the run
			if long {
				// Five entries a second apart, the newest a second ago:
				// more than a state string holds.
				t0 = rdb.Time(ctx).Val().UnixMilli()
				var list []any
				for k := int64(5); k >= 1; k-- {
					list = append(list, t0-1000*k, 1)
				}
				// The list expires at the first whole hour after the
				// state's expiry, as a call sets it.
				rdb.RPush(ctx, keys[1], list...)
				rdb.PExpireAt(ctx, keys[1], time.UnixMilli(listEnd(t0-1000+hour)))
				rdb.Set(ctx, keys[0], head+"l"+b36(t0-1000)+" 255s0 5", time.Hour)
			}
			ks := append(append(append([]string{}, keys...), keys...), keys...)
			raw, err := script.Run(ctx, rdb, ks, append([]any{fast, "batch", ""}, args...)...).Slice()
			if err != nil {
				t.Fatal(err)
			}
			if ttl := time.Duration(raw[1].(int64)) * time.Millisecond; ttl <= 59*time.Minute || ttl > time.Hour {
				t.Errorf("fast %s long %v: state TTL %v; want (59m, 1h]", fast, long, ttl)
			}
			st := rdb.Get(ctx, keys[0]).Val()
			list := rdb.LRange(ctx, keys[1], 0, -1).Val()
			if !long {
				// The run's ms, then the one entry at it: 3 permits.
				if f := strings.Fields(st); raw[2].(int64) != -2 || !strings.HasPrefix(st, head+"i") || len(f) != 3 || f[2] != "3" {
					t.Errorf("fast %s: state %q, list %q (TTL %d); want one entry of 3 permits inline, no list", fast, st, list, raw[2])
				}
				stored[i] = st
				continue
			}
			// The list's TTL ends at the first whole hour after the
			// state's new expiry (the run's ms and an hour): read in the
			// run's script, between Redis TIMEs raw[3] and raw[4] (µs).
			runMs, _ := strconv.ParseInt(strings.Fields(strings.TrimPrefix(st, head+"l"))[0], 36, 64)
			want := listEnd(runMs + hour)
			if from, to := raw[3].(int64)/1000+raw[2].(int64), raw[4].(int64)/1000+raw[2].(int64); want < from-1 || want > to+1 {
				t.Errorf("fast %s: list TTL %d ms, ending in [%d, %d]; want %d", fast, raw[2], from, to, want)
			}
			if len(list) != 12 || list[11] != "3" {
				t.Errorf("fast %s: list %q; want six entries, the newest of 3 permits", fast, list)
			}
			// After the state's last (the run's ms): its expiry, one
			// interval (1h in ms, base 36) on, the 8 permits counted, the
			// tail's 3 and the head, at t0-5000, as far back.
			if f := strings.Fields(st); len(f) != 6 || f[2] != "255s0" || f[3] != "8" || f[4] != "3" || f[5] != b36(runMs-(t0-5000)) {
				t.Errorf("fast %s: state %q; want the interval (1h in ms), a count of 8, the tail's 3 and the head %s back", fast, st, b36(runMs-(t0-5000)))
			}
			stored[i] = strings.Join(list[10:], " ")
		}
		if !strings.HasSuffix(stored[0], " 3") || stored[0][strings.LastIndex(stored[0], " "):] != stored[1][strings.LastIndex(stored[1], " "):] {
			t.Errorf("long %v: fast %q, general %q", long, stored[0], stored[1])
		}
	}
}

// twinSetup starts a Redis, a store on it, and the script that runs the
// library's keyed calls on a key and its twin (slidingLogTwinScript).
func twinSetup(t *testing.T) (*redis.Client, *Store, *redis.Script) {
	rdb := redistest.Start(t).Client(t)
	s, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return rdb, s, redis.NewScript(limiterLua + slidingLogTwinScript)
}
