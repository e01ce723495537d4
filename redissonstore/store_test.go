package redissonstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
)

type env struct {
	t    *testing.T
	ctx  context.Context
	rdb  *redis.Client
	clk  *clock.Fake
	rnd  *rand.Rand
	java map[Layout]*javaSide
}

func newEnv(t *testing.T) *env {
	rdb := redistest.Start(t).Client(t)
	return &env{t: t, ctx: context.Background(), rdb: rdb, clk: clock.NewFake(t0), rnd: rand.New(rand.NewPCG(1, 2)), java: map[Layout]*javaSide{}}
}

// javaSide is the Java client of a layout, made on first use: the legacy
// one replays the seed's scripts, so only the tests that use it need the
// seed (they skip without it).
func (e *env) javaSide(layout Layout) *javaSide {
	e.t.Helper()
	j, ok := e.java[layout]
	if !ok {
		j = newJavaSide(e.t, e.rdb, layout, "java-client", 0, e.rnd)
		e.java[layout] = j
	}
	return j
}

func (e *env) store(opts ...Option) *Store {
	e.t.Helper()
	s, err := New(e.rdb, append([]Option{WithTimeSource(e.clk)}, opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func (e *env) limiter(s redlimit.Store, name string, opts ...redlimit.Option) *redlimit.Limiter {
	e.t.Helper()
	l, err := redlimit.New(s, name, append([]redlimit.Option{redlimit.WithClock(e.clk)}, opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

func (e *env) try(l *redlimit.Limiter, n int64) redlimit.Result {
	e.t.Helper()
	r, err := l.TryAcquire(e.ctx, n)
	if err != nil {
		e.t.Fatalf("TryAcquire(%d): %v", n, err)
	}
	return r
}

// javaAcquire is Redisson's tryAcquire(n) at the fake clock's time.
func (e *env) javaAcquire(layout Layout, name string, n int64) (bool, int64) {
	e.t.Helper()
	g, d, err := e.javaSide(layout).acquire(e.ctx, e.rdb, name, n, e.clk.Now().UnixMilli())
	if err != nil {
		e.t.Fatalf("java tryAcquire(%d): %v", n, err)
	}
	return g, d
}

// invariant checks Redisson's value + (permits in the log) = rate.
func (e *env) invariant(layout Layout, name string, rate int64) {
	e.t.Helper()
	k := KeysOf(name)
	v, err := e.rdb.Get(e.ctx, k.Value).Int64()
	if err != nil {
		e.t.Fatal(err)
	}
	var sum int64
	for _, m := range e.rdb.ZRange(e.ctx, k.Permits, 0, -1).Val() {
		d, err := DecodeMember([]byte(m), layout)
		if err != nil {
			e.t.Fatal(err)
		}
		sum += d.Permits
	}
	if v+sum != rate {
		e.t.Fatalf("value %d + permits in the log %d != rate %d", v, sum, rate)
	}
}

func bothLayouts(t *testing.T, f func(t *testing.T, layout Layout)) {
	for _, l := range []Layout{Legacy, Current} {
		t.Run(l.String(), func(t *testing.T) { f(t, l) })
	}
}

func TestKeysAreRedissons(t *testing.T) {
	for name, want := range map[string]Keys{
		"myRateLimiter":   {"myRateLimiter", "{myRateLimiter}:value", "{myRateLimiter}:permits"},
		"LIMIT:LIMIT_ALL": {"LIMIT:LIMIT_ALL", "{LIMIT:LIMIT_ALL}:value", "{LIMIT:LIMIT_ALL}:permits"},
		"a{b}c":           {"a{b}c", "a{b}c:value", "a{b}c:permits"},
	} {
		if got := KeysOf(name); got != want {
			t.Errorf("KeysOf(%q) = %+v, want %+v", name, got, want)
		}
	}
	k := KeysOf("rl")
	if k.ClientValue("ed14") != "{rl}:value:ed14" || k.ClientPermits("ed14") != "{rl}:permits:ed14" {
		t.Errorf("client keys %q %q", k.ClientValue("ed14"), k.ClientPermits("ed14"))
	}
	// The store writes exactly those keys.
	e := newEnv(t)
	s := e.store(WithClientID("go-1"))
	l := e.limiter(s, "rl")
	if err := l.SetRate(e.ctx, redlimit.PerInterval(2, time.Second).WithMode(redlimit.PerClient)); err != nil {
		t.Fatal(err)
	}
	e.try(l, 1)
	keys := e.rdb.Keys(e.ctx, "*").Val()
	slices.Sort(keys)
	if fmt.Sprint(keys) != "[rl {rl}:permits:go-1 {rl}:value:go-1]" {
		t.Fatalf("keys %v", keys)
	}
}

// TestDecodeMember packs members in Redis with Lua's struct library, as
// each Redisson generation does, and decodes them in Go.
func TestDecodeMember(t *testing.T) {
	e := newEnv(t)
	pack := func(format string, args ...any) []byte {
		src := "return struct.pack(ARGV[1], unpack(ARGV, 2))"
		if format == "Bc0I" || format == "Lc0I" {
			src = "return struct.pack(ARGV[1], string.len(ARGV[2]), ARGV[2], ARGV[3])"
		}
		b, err := e.rdb.Eval(e.ctx, src, nil, append([]any{format}, args...)...).Text()
		if err != nil {
			t.Fatal(err)
		}
		return []byte(b)
	}
	random := int64(-2193289253268890349)
	m, err := DecodeMember(pack("fI", random, 7), Legacy)
	if err != nil || m.Encoding != EncodingFI || m.Permits != 7 || m.Float != float32(random) {
		t.Fatalf("fI: %+v, %v (want float %g)", m, err, float32(random))
	}
	for _, n := range []int{8, 16} {
		r := strings.Repeat("\xfe\x01", n/2)
		m, err = DecodeMember(pack("Bc0I", r, 1<<32-1), Current)
		if err != nil || m.Encoding != EncodingBc0I || m.Permits != 1<<32-1 || string(m.Random) != r {
			t.Fatalf("Bc0I with %d random bytes: %+v, %v", n, m, err)
		}
	}
	m, err = DecodeMember(pack("Lc0I", "8084288252659522732", 3), Current)
	if err != nil || m.Encoding != EncodingLc0I || m.Permits != 3 || string(m.Random) != "8084288252659522732" {
		t.Fatalf("Lc0I: %+v, %v", m, err)
	}
	// 8 bytes starting with 3 fit both fI and Bc0I: the layout decides.
	amb := pack("Bc0I", "abc", 5)
	if m, _ := DecodeMember(amb, Current); m.Encoding != EncodingBc0I || m.Permits != 5 || string(m.Random) != "abc" {
		t.Fatalf("ambiguous member read as current: %+v", m)
	}
	if m, _ := DecodeMember(amb, Legacy); m.Encoding != EncodingFI || m.Permits != 5 {
		t.Fatalf("ambiguous member read as legacy: %+v", m)
	}
	if _, err := DecodeMember([]byte("xyz"), Current); !errors.Is(err, redlimit.ErrCorrupt) {
		t.Fatalf("3 bytes: %v, want ErrCorrupt", err)
	}
}

// TestInspect: the grant logs of both generations, written by Redisson's own
// scripts, decoded: config, permits left, grant times, random parts.
func TestInspect(t *testing.T) {
	bothLayouts(t, func(t *testing.T, layout Layout) {
		e := newEnv(t)
		j := e.javaSide(layout)
		name := "inspect-" + layout.String()
		if _, err := j.trySet(e.ctx, e.rdb, name, 5, 10_000, "0"); err != nil {
			t.Fatal(err)
		}
		randoms := []string{"8084288252659522732", "-2193289253268890349"}
		if layout == Current {
			randoms = []string{"\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f", "{}:\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8\xf7\xf6\xf5\xf4\xf3"}
		}
		for i, n := range []int64{2, 1} {
			if err := j.tryAcquire.Run(e.ctx, e.rdb, j.keys(name), n, e.clk.Now().UnixMilli(), randoms[i]).Err(); !errors.Is(err, redis.Nil) {
				t.Fatalf("java tryAcquire: %v", err)
			}
			e.clk.Advance(6 * time.Second)
		}
		// Now t0+12s: the first grant (t0) has aged out, the second (t0+6s) counts.
		in, err := e.store(WithLayout(layout)).Inspect(e.ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if !in.Initialized || in.ConfigErr != nil || !in.Config.SameLimit(redlimit.PerInterval(5, 10*time.Second)) {
			t.Fatalf("config %+v, %v", in.Config, in.ConfigErr)
		}
		st := in.States[0]
		if !st.HasValue || st.Value != 2 || st.Left != 4 || st.InUse != 1 || len(st.Grants) != 2 {
			t.Fatalf("overall state %+v", st)
		}
		g0, g1 := st.Grants[0], st.Grants[1]
		if !g0.At.Equal(t0) || !g0.Expired || g0.Permits != 2 || !g1.At.Equal(t0.Add(6*time.Second)) || g1.Expired || g1.Permits != 1 {
			t.Fatalf("grants %+v / %+v", g0, g1)
		}
		for i, g := range st.Grants {
			if g.Encoding != layout.encoding() || g.Err != nil {
				t.Fatalf("grant %d: %+v", i, g)
			}
			if layout == Legacy {
				want, _ := strconv.ParseInt(randoms[i], 10, 64)
				if g.Float != float32(want) {
					t.Fatalf("grant %d: random %g, want %g", i, g.Float, float32(want))
				}
			} else if string(g.Random) != randoms[i] {
				t.Fatalf("grant %d: random %x, want %x", i, g.Random, randoms[i])
			}
		}
		text := in.String()
		for _, want := range []string{"5 per 10s (sliding-log, overall)", "4 left, 1 in use", "2 permits", "(expired)", "1 permit,", "(in use)"} {
			if !strings.Contains(text, want) {
				t.Fatalf("String() lacks %q:\n%s", want, text)
			}
		}
		t.Logf("\n%s", text)
	})
}

// TestInspectPerClient finds PER_CLIENT states by scanning and decodes them.
func TestInspectPerClient(t *testing.T) {
	e := newEnv(t)
	s := e.store(WithLayout(Current))
	cfg := redlimit.PerInterval(3, time.Minute).WithMode(redlimit.PerClient)
	a := e.limiter(s, "pc{tag}", redlimit.WithClientID("a*[1]"))
	b := e.limiter(s, "pc{tag}", redlimit.WithClientID("b"))
	if err := a.SetRate(e.ctx, cfg); err != nil {
		t.Fatal(err)
	}
	e.try(a, 2)
	e.try(b, 3)
	ids, err := s.ClientIDs(e.ctx, "pc{tag}")
	if err != nil || fmt.Sprint(ids) != "[a*[1] b]" {
		t.Fatalf("ClientIDs = %v, %v", ids, err)
	}
	in, err := s.Inspect(e.ctx, "pc{tag}", ids...)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.States) != 3 || in.States[1].Client != "a*[1]" || in.States[1].Left != 1 || in.States[2].Left != 0 || in.States[2].Grants[0].Permits != 3 {
		t.Fatalf("states %+v", in.States)
	}
}

// TestMigrate: a limiter exhausted by Java clients stays exhausted in the
// native store after the migration, until its grants would have aged out.
func TestMigrate(t *testing.T) {
	bothLayouts(t, func(t *testing.T, layout Layout) {
		e := newEnv(t)
		name := "migrate-" + layout.String()
		j := e.javaSide(layout)
		if _, err := j.trySet(e.ctx, e.rdb, name, 3, 10_000, "0"); err != nil {
			t.Fatal(err)
		}
		e.javaAcquire(layout, name, 1) // t0
		e.clk.Advance(4 * time.Second)
		e.javaAcquire(layout, name, 2) // t0+4s: exhausted
		e.clk.Advance(2 * time.Second)
		if g, _ := e.javaAcquire(layout, name, 1); g {
			t.Fatal("Redisson granted beyond the rate")
		}
		native, err := redisstore.New(e.rdb, redisstore.WithTimeSource(e.clk), redisstore.WithPrefix("native:"))
		if err != nil {
			t.Fatal(err)
		}
		mig, err := e.store(WithLayout(layout)).Migrate(e.ctx, name, native)
		if err != nil {
			t.Fatal(err)
		}
		if !mig.Config.SameLimit(redlimit.PerInterval(3, 10*time.Second)) || len(mig.States) != 1 || mig.States[0].Carried != 3 || mig.States[0].Grants != 2 || mig.States[0].Dropped != 0 {
			t.Fatalf("migration %+v", mig)
		}
		l := e.limiter(native, name)
		// t0+6s: exhausted; the first permit returns at t0+10s.
		if r := e.try(l, 1); r.Allowed || r.RetryAfter != 4*time.Second {
			t.Fatalf("right after the migration: %+v", r)
		}
		e.clk.Set(t0.Add(10*time.Second - time.Millisecond))
		if r := e.try(l, 1); r.Allowed || r.RetryAfter != time.Millisecond {
			t.Fatalf("1 ms before the first grant ages out: %+v", r)
		}
		e.clk.Set(t0.Add(10 * time.Second))
		if r := e.try(l, 1); !r.Allowed || r.Remaining != 0 {
			t.Fatalf("when the first grant ages out: %+v", r)
		}
		if r := e.try(l, 1); r.Allowed || r.RetryAfter != 4*time.Second {
			t.Fatalf("then: %+v", r)
		}
		e.clk.Set(t0.Add(14 * time.Second))
		if r := e.try(l, 2); !r.Allowed {
			t.Fatalf("when the second grant ages out: %+v", r)
		}
	})
}

// TestMigratePerClient carries every client's state (found by scanning) and
// clamps a Redisson state holding more than rate permits in one window.
func TestMigratePerClient(t *testing.T) {
	e := newEnv(t)
	s := e.store(WithLayout(Current))
	cfg := redlimit.PerInterval(2, time.Minute).WithMode(redlimit.PerClient)
	a := e.limiter(s, "mpc", redlimit.WithClientID("a"))
	if err := a.SetRate(e.ctx, cfg); err != nil {
		t.Fatal(err)
	}
	e.try(a, 2)
	e.clk.Advance(time.Second)
	e.try(e.limiter(s, "mpc", redlimit.WithClientID("b")), 1)
	// Client c's log holds 3 permits in one window (as a lost update would leave it).
	k := KeysOf("mpc")
	for i, r := range []string{"r1", "r2", "r3"} {
		m := string([]byte{byte(len(r))}) + r + "\x01\x00\x00\x00"
		e.rdb.ZAdd(e.ctx, k.ClientPermits("c"), redis.Z{Score: float64(e.clk.Now().UnixMilli() + int64(i)), Member: m})
	}
	e.rdb.Set(e.ctx, k.ClientValue("c"), 0, 0)
	native, err := redisstore.New(e.rdb, redisstore.WithTimeSource(e.clk), redisstore.WithPrefix("native:"))
	if err != nil {
		t.Fatal(err)
	}
	mig, err := s.Migrate(e.ctx, "mpc", native)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(mig.States) != "[{a 1 2 0} {b 1 1 0} {c 2 2 1}]" {
		t.Fatalf("migrated %+v", mig.States)
	}
	for id, want := range map[string]int64{"a": 0, "b": 1, "c": 0} {
		l := e.limiter(native, "mpc", redlimit.WithClientID(id))
		if n, err := l.AvailablePermits(e.ctx); err != nil || n != want {
			t.Fatalf("client %s after migration: %d available, %v; want %d", id, n, err, want)
		}
	}
}

// TestTypedErrors: bad input and unreadable data are typed errors, never raw
// Lua errors, and bad input touches nothing (the conformance suite's
// BadInput holds the rest: a limiter never set, permits 0).
func TestTypedErrors(t *testing.T) {
	e := newEnv(t)
	s := e.store(WithLayout(Legacy))
	l := e.limiter(s, "typed")
	if err := l.SetRate(e.ctx, redlimit.PerInterval(3, time.Second)); err != nil {
		t.Fatal(err)
	}
	e.try(l, 1)
	before := e.rdb.ZCard(e.ctx, KeysOf("typed").Permits).Val()
	if _, err := l.TryAcquire(e.ctx, 4); !errors.Is(err, redlimit.ErrPermitsExceedRate) || !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatalf("4 permits of 3: %v", err)
	}
	if _, err := s.Acquire(e.ctx, redlimit.Key{Name: "typed", Client: "x"}, redlimit.Config{}, 4, time.Second); !errors.Is(err, redlimit.ErrPermitsExceedRate) {
		t.Fatalf("store, 4 permits of 3: %v", err)
	}
	if after := e.rdb.ZCard(e.ctx, KeysOf("typed").Permits).Val(); after != before {
		t.Fatalf("a refused bad request touched the log: %d -> %d members", before, after)
	}
	if _, err := s.Acquire(e.ctx, redlimit.Key{Name: "typed", Client: "x"}, redlimit.Config{}, MaxPermits+1, 0); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatalf("2^32 permits: %v", err)
	}
	if err := l.SetRate(e.ctx, redlimit.TokenBucketConfig(1, time.Second, 2)); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatalf("token bucket: %v", err)
	}
	if _, err := New(e.rdb, WithLayout(Legacy), WithKeepAlive(time.Hour)); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatalf("legacy keepAliveTime: %v", err)
	}
	if _, err := New(nil); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatalf("nil client: %v", err)
	}
	ka := e.store(WithKeepAlive(time.Second))
	if err := e.limiter(ka, "ka").SetRate(e.ctx, redlimit.PerMinute(1)); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatalf("keepAliveTime below the interval: %v", err)
	}
	// Partial, unreadable and wrongly typed data.
	e.rdb.HSet(e.ctx, "partial", "rate", 3)
	if _, err := e.limiter(s, "partial").TryAcquire(e.ctx, 1); !errors.Is(err, redlimit.ErrNotInitialized) {
		t.Fatalf("hash without interval and type: %v", err)
	}
	e.rdb.HSet(e.ctx, "badtype", "rate", 3, "interval", 1000, "type", 7)
	if _, err := e.limiter(s, "badtype").TryAcquire(e.ctx, 1); !errors.Is(err, redlimit.ErrCorrupt) {
		t.Fatalf("type 7: %v", err)
	}
	if _, err := e.limiter(s, "badtype").Config(e.ctx); !errors.Is(err, redlimit.ErrCorrupt) {
		t.Fatalf("type 7, Config: %v", err)
	}
	e.rdb.Set(e.ctx, "str", "x", 0)
	if _, err := e.limiter(s, "str").TryAcquire(e.ctx, 1); !errors.Is(err, redlimit.ErrCorrupt) {
		t.Fatalf("config key of the wrong type: %v", err)
	}
	e.rdb.HSet(e.ctx, "badvalue", "rate", 3, "interval", 1000, "type", 0)
	e.rdb.Set(e.ctx, KeysOf("badvalue").Value, "many", 0)
	if _, err := e.limiter(s, "badvalue").TryAcquire(e.ctx, 1); !errors.Is(err, redlimit.ErrCorrupt) {
		t.Fatalf("counter 'many': %v", err)
	}
}

// TestOtherGeneration: a store whose layout is not the data's reports the
// encoding it found instead of misreading it. The legacy data is written by
// a legacy store (the interop tests hold it equal to Redisson's scripts).
func TestOtherGeneration(t *testing.T) {
	e := newEnv(t)
	legacy := e.limiter(e.store(WithLayout(Legacy)), "gen")
	if set, err := legacy.TrySetRate(e.ctx, redlimit.PerInterval(5, 10*time.Second)); !set || err != nil {
		t.Fatalf("TrySetRate = %v, %v", set, err)
	}
	if r := e.try(legacy, 1); !r.Allowed {
		t.Fatalf("legacy store's first grant: %+v", r)
	}
	// A SetRate that keeps the state writes the config and leaves the state
	// it cannot read as it was, and says so.
	err := e.limiter(e.store(WithLayout(Current)), "gen").SetRate(e.ctx, redlimit.PerInterval(5, 10*time.Second))
	if !errors.Is(err, redlimit.ErrCorrupt) || !strings.Contains(err.Error(), "config written, state kept as it was") {
		t.Fatalf("current store's SetRate on legacy data: %v", err)
	}
	e.clk.Advance(11 * time.Second)
	_, err = e.limiter(e.store(WithLayout(Current)), "gen").TryAcquire(e.ctx, 1)
	if !errors.Is(err, redlimit.ErrCorrupt) || !strings.Contains(err.Error(), "encoded fI, not Bc0I") {
		t.Fatalf("current store on legacy data: %v", err)
	}
	if r := e.try(e.limiter(e.store(WithLayout(Legacy)), "gen"), 1); !r.Allowed {
		t.Fatalf("legacy store on legacy data: %+v", r)
	}
}

// TestSetRateKeep: a SetRate that keeps state rebuilds Redisson's counter
// and log so that Redisson's own script then decides as an exact sliding
// log of the new config.
func TestSetRateKeep(t *testing.T) {
	bothLayouts(t, func(t *testing.T, layout Layout) {
		e := newEnv(t)
		name := "keep-" + layout.String()
		l := e.limiter(e.store(WithLayout(layout)), name)
		if err := l.SetRate(e.ctx, redlimit.PerInterval(5, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		e.try(l, 2) // t0
		e.clk.Advance(time.Second)
		e.try(l, 3) // t0+1s
		// Lower the rate to 2: 5 are in use; the oldest give up permits so
		// that 2 remain, the newest ones.
		if err := l.SetRate(e.ctx, redlimit.PerInterval(2, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		e.invariant(layout, name, 2)
		if g, _ := e.javaAcquire(layout, name, 1); g {
			t.Fatal("Redisson granted at once after lowering the rate below the permits in use")
		}
		e.clk.Set(t0.Add(10 * time.Second)) // the grant of t0 ages out; 3 of t0+1s still in use
		if g, _ := e.javaAcquire(layout, name, 1); g {
			t.Fatal("Redisson granted while 3 permits of t0+1s are in use (rate 2)")
		}
		e.clk.Set(t0.Add(11 * time.Second))
		if g, _ := e.javaAcquire(layout, name, 2); !g {
			t.Fatal("Redisson refused 2 once everything aged out")
		}
		// Raise the rate: the permits in use still count, only the difference is new.
		if err := l.SetRate(e.ctx, redlimit.PerInterval(5, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		e.invariant(layout, name, 5)
		if g, _ := e.javaAcquire(layout, name, 3); !g {
			t.Fatal("Redisson refused 3 of 5 with 2 in use")
		}
		if g, _ := e.javaAcquire(layout, name, 1); g {
			t.Fatal("Redisson granted a 6th permit")
		}
		// A shorter interval ages the grants out sooner.
		if err := l.SetRate(e.ctx, redlimit.PerInterval(5, time.Second)); err != nil {
			t.Fatal(err)
		}
		e.clk.Advance(time.Second)
		if g, _ := e.javaAcquire(layout, name, 5); !g {
			t.Fatal("Redisson refused 5 after shortening the interval")
		}
		e.invariant(layout, name, 5)
	})
}

// TestRelease: permits handed back leave the log and return to the counter,
// and Redisson's own script grants them again.
func TestRelease(t *testing.T) {
	bothLayouts(t, func(t *testing.T, layout Layout) {
		e := newEnv(t)
		name := "release-" + layout.String()
		l := e.limiter(e.store(WithLayout(layout)), name)
		if err := l.SetRate(e.ctx, redlimit.PerInterval(5, time.Minute)); err != nil {
			t.Fatal(err)
		}
		e.try(l, 2)
		e.clk.Advance(time.Second)
		if g, _ := e.javaAcquire(layout, name, 3); !g {
			t.Fatal("java refused")
		}
		// The Go client hands back only the 2 it was granted, never Java's.
		if got, err := l.Release(e.ctx, 4); err != nil || got != 2 {
			t.Fatalf("Release(4) holding 2 = %d, %v; want 2", got, err)
		}
		e.invariant(layout, name, 5)
		if g, _ := e.javaAcquire(layout, name, 2); !g {
			t.Fatal("Redisson refused the 2 permits handed back")
		}
		if g, _ := e.javaAcquire(layout, name, 1); g {
			t.Fatal("Redisson granted beyond the rate after a release")
		}
		// Cancel takes only from grants of one instant.
		s := e.store(WithLayout(layout))
		key := redlimit.Key{Name: name, Client: "x"}
		// Release took t0's grant, the Go client's own: it may take no
		// grant newer than its oldest handed back (an Overall log does not
		// say whose a grant is, and Java's later one was used).
		if got, err := s.Cancel(e.ctx, key, redlimit.Config{}, t0, 5); err != nil || got != 0 {
			t.Fatalf("Cancel at t0 = %d, %v; want 0: Release took t0's grant", got, err)
		}
		if got, err := s.Cancel(e.ctx, key, redlimit.Config{}, t0.Add(-time.Hour), 5); err != nil || got != 0 {
			t.Fatalf("Cancel of an aged-out instant = %d, %v", got, err)
		}
		e.invariant(layout, name, 5)
		// The store itself, asked directly, hands back any grant in the
		// window no later than the bound given, without one any at all.
		if got, err := s.Release(e.ctx, key, redlimit.Config{}, 100, t0); err != nil || got != 0 {
			t.Fatalf("store Release(100) up to t0 = %d, %v; want 0: all 5 are later", got, err)
		}
		if got, err := s.Release(e.ctx, key, redlimit.Config{}, 100, time.Time{}); err != nil || got != 5 {
			t.Fatalf("store Release(100) = %d, %v; want the 5 in the window", got, err)
		}
		if n, err := l.AvailablePermits(e.ctx); err != nil || n != 5 {
			t.Fatalf("available %d, %v", n, err)
		}
	})
}

// TestWaiting: Acquire sleeps the delay Redisson returns on the store's
// clock and tries again; a cancelled wait leaves nothing behind. (The
// suite's WaitersFIFO and TryAcquireWait need Reservations and
// ExactRetryAfter, which Redisson's limiter lacks.)
func TestWaiting(t *testing.T) {
	e := newEnv(t)
	s := e.store(WithLayout(Legacy))
	name := "wait"
	l := e.limiter(s, name)
	if set, err := l.TrySetRate(e.ctx, redlimit.PerInterval(1, time.Second)); !set || err != nil {
		t.Fatalf("TrySetRate = %v, %v", set, err)
	}
	if r := e.try(l, 1); !r.Allowed {
		t.Fatalf("first grant: %+v", r)
	}
	res := make(chan redlimit.Result, 1)
	go func() {
		r, err := l.Acquire(e.ctx, 1)
		if err != nil {
			t.Error(err)
		}
		res <- r
	}()
	waitTimers(t, e.clk, 1)
	e.clk.Advance(time.Second)
	if r := <-res; !r.Allowed || !r.At.Equal(t0.Add(time.Second)) {
		t.Fatalf("waiter: %+v", r)
	}
	// A bounded wait shorter than the delay refuses at once.
	if r, err := l.TryAcquireWait(e.ctx, 1, 999*time.Millisecond); err != nil || r.Allowed || r.RetryAfter != time.Second {
		t.Fatalf("TryAcquireWait(999ms) = %+v, %v", r, err)
	}
	// A cancelled waiter returns ctx's error and takes nothing.
	ctx, cancel := context.WithCancel(e.ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := l.Acquire(ctx, 1)
		errc <- err
	}()
	waitTimers(t, e.clk, 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	if n := e.rdb.ZCard(e.ctx, KeysOf(name).Permits).Val(); n != 1 {
		t.Fatalf("log holds %d grants, want 1", n)
	}
}

func waitTimers(t *testing.T, clk *clock.Fake, n int) {
	t.Helper()
	guard := make(chan struct{})
	timer := time.AfterFunc(30*time.Second, func() { close(guard) })
	defer timer.Stop()
	if !clk.WaitForTimers(n, guard) {
		t.Fatalf("%d timers never set", n)
	}
}

// TestExpireDelete: Expire, ClearExpire and Delete reach every key Redisson's
// do (this client's PER_CLIENT keys included).
func TestExpireDelete(t *testing.T) {
	e := newEnv(t)
	s := e.store(WithClientID("me"))
	l := e.limiter(s, "exp")
	if err := l.SetRate(e.ctx, redlimit.PerInterval(3, time.Minute)); err != nil {
		t.Fatal(err)
	}
	e.try(l, 1)
	if err := l.SetRate(e.ctx, redlimit.PerInterval(3, time.Minute).WithMode(redlimit.PerClient)); err != nil {
		t.Fatal(err)
	}
	e.try(l, 1)
	k := KeysOf("exp")
	all := []string{k.Config, k.Value, k.Permits, k.ClientValue("me"), k.ClientPermits("me")}
	if ok, err := l.Expire(e.ctx, time.Hour); !ok || err != nil {
		t.Fatalf("Expire = %v, %v", ok, err)
	}
	for _, key := range all {
		if d := e.rdb.PTTL(e.ctx, key).Val(); d <= 0 && key != k.Value && key != k.Permits {
			t.Fatalf("%s: TTL %v", key, d)
		}
	}
	if ok, err := l.ClearExpire(e.ctx); !ok || err != nil {
		t.Fatalf("ClearExpire = %v, %v", ok, err)
	}
	for _, key := range all {
		if d := e.rdb.PTTL(e.ctx, key).Val(); d != -1 && d != -2 {
			t.Fatalf("%s: TTL %v after ClearExpire", key, d)
		}
	}
	if ok, err := l.Delete(e.ctx); !ok || err != nil {
		t.Fatalf("Delete = %v, %v", ok, err)
	}
	if n := e.rdb.Exists(e.ctx, all...).Val(); n != 0 {
		t.Fatalf("%d keys left after Delete", n)
	}
	if _, err := l.Config(e.ctx); !errors.Is(err, redlimit.ErrNotInitialized) {
		t.Fatalf("Config after Delete: %v", err)
	}
}

// TestKeepAlive: the current layout's keepAliveTime is written and renews
// every key's TTL on each acquire, as Redisson does since late 2024.
func TestKeepAlive(t *testing.T) {
	e := newEnv(t)
	s := e.store(WithKeepAlive(time.Hour))
	l := e.limiter(s, "alive")
	if set, err := l.TrySetRate(e.ctx, redlimit.PerInterval(2, time.Minute)); !set || err != nil {
		t.Fatalf("TrySetRate = %v, %v", set, err)
	}
	k := KeysOf("alive")
	if v := e.rdb.HGet(e.ctx, k.Config, "keepAliveTime").Val(); v != "3600000" {
		t.Fatalf("keepAliveTime %q", v)
	}
	e.try(l, 1)
	for _, key := range []string{k.Config, k.Value, k.Permits} {
		if d := e.rdb.PTTL(e.ctx, key).Val(); d <= 59*time.Minute {
			t.Fatalf("%s: TTL %v", key, d)
		}
	}
	in, err := s.Inspect(e.ctx, "alive")
	if err != nil || in.KeepAlive != time.Hour {
		t.Fatalf("Inspect keepAlive %v, %v", in.KeepAlive, err)
	}
	// Without keepAliveTime the state takes the hash's TTL (set by Expire)
	// on each acquire; the legacy layout sets none.
	for _, layout := range []Layout{Current, Legacy} {
		name := "ttl-" + layout.String()
		l := e.limiter(e.store(WithLayout(layout)), name)
		if err := l.SetRate(e.ctx, redlimit.PerInterval(5, time.Minute)); err != nil {
			t.Fatal(err)
		}
		if ok, err := l.Expire(e.ctx, 2*time.Hour); !ok || err != nil {
			t.Fatalf("Expire = %v, %v", ok, err)
		}
		e.try(l, 1)
		d := e.rdb.PTTL(e.ctx, KeysOf(name).Permits).Val()
		if (layout == Current) != (d > time.Hour) {
			t.Fatalf("%s: log TTL %v after an acquire under a config with a TTL", layout, d)
		}
	}
}

// TestSelfHealing: a client that knows the config writes it back when Redis
// lost it (the suite's SelfHealingConfig), as Redisson's trySetRate would:
// Java then finds it.
func TestSelfHealing(t *testing.T) {
	e := newEnv(t)
	cfg := redlimit.PerInterval(2, time.Minute)
	l := e.limiter(e.store(), "heal", redlimit.WithConfig(cfg))
	if r := e.try(l, 1); !r.Allowed || r.Remaining != 1 {
		t.Fatalf("first call: %+v", r)
	}
	e.rdb.FlushAll(e.ctx)
	if r := e.try(l, 2); !r.Allowed {
		t.Fatalf("after data loss: %+v", r)
	}
	if c, err := e.javaSide(Current).trySet(e.ctx, e.rdb, "heal", 9, 1, "0"); err != nil || c {
		t.Fatalf("the restored config is Redisson's: trySetRate wrote %v, %v", c, err)
	}
}

// TestLegacyStaleClientState: legacy setRate resets the Overall state only,
// so a PER_CLIENT counter survives a new rate out of step with its log;
// Redisson's script then fails on a nil ("attempt to perform arithmetic on a
// nil value"), while the store recounts from the log and grants.
func TestLegacyStaleClientState(t *testing.T) {
	e := newEnv(t)
	j := e.javaSide(Legacy)
	name := "stale"
	if _, err := j.trySet(e.ctx, e.rdb, name, 2, 1000, "1"); err != nil {
		t.Fatal(err)
	}
	e.javaAcquire(Legacy, name, 2)
	if err := j.set(e.ctx, e.rdb, name, 5, 1000, "1"); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(2 * time.Second)
	if _, _, err := j.acquire(e.ctx, e.rdb, name, 5, e.clk.Now().UnixMilli()); err == nil || !strings.Contains(err.Error(), "nil value") {
		t.Fatalf("Redisson's own script: %v; want its nil-arithmetic failure", err)
	}
	l := e.limiter(e.store(WithLayout(Legacy)), name, redlimit.WithClientID(j.id))
	if r := e.try(l, 5); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("store: %+v", r)
	}
	if g, _ := e.javaAcquire(Legacy, name, 1); g {
		t.Fatal("Redisson granted beyond the rate after the recount")
	}
}
