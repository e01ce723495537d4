package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
)

// Differential drives two stores that must answer alike through the same
// random trace: acquires (with and without waits, sometimes of more
// permits than can ever be granted), cancelled reservations, releases,
// reads, config changes keeping or resetting the grants, data loss, and
// time steps on one injected clock; every answer of Got must equal Ref's.
// redisstore holds its Lua to the Go rules with it (Ref a memory store),
// refusalcache its local refusals to the plain store's.
//
// The zero value of each field takes its default.
type Differential struct {
	// Names are the limiters a trace uses. Default: one, "trace".
	Names []string
	// Ops is the calls per trace. Default 100.
	Ops int
	// MaxRate bounds the random configs' Rate (an occasional fine rate of
	// up to 3000 per interval aside), MaxParam their Burst and Capacity.
	// Defaults 12 and 15.
	MaxRate, MaxParam int64
	// MaxWait bounds the random finite waits. Default 60 ms.
	MaxWait time.Duration
	// OnePermit: three acquires in four ask for one permit (the others for
	// up to one more than the most grantable), so that limiters run dry and
	// refuse; otherwise every count up to that is as likely.
	OnePermit bool
	// Expiry adds Expire and ClearExpire to the calls (for stores that
	// expire by the injected clock).
	Expiry bool
	// Nanoseconds adds time steps of under a microsecond.
	Nanoseconds bool
	// Local, when set, counts Got's refusals answered without the store
	// (a refusal cache's); each is compared like any other call and
	// counted in Outcomes.
	Local func() int64
	// Log logs every call; Dump, when set, is called before a failure is
	// reported (to log a store's keys, say).
	Log  bool
	Dump func(t *testing.T)
}

// Outcomes counts what traces exercised: a test requires the kinds its
// stores must reach, or the traces prove little.
type Outcomes struct {
	Granted, Refused, Reserved, Full, Cancelled, Released int
	// Restored: the config was lost and a client that remembered it
	// restored it; NotInitialized: nobody remembered it.
	Restored, NotInitialized, TooMany, Expired int
	// LocalRefusals were answered by Got without its store (Local),
	// LocalLeaky of them on a leaky bucket.
	LocalRefusals, LocalLeaky int
}

type reservation struct {
	name, client string
	at           time.Time
	n            int64
}

// Trace runs one trace, seeded, through ref and got, both reading clk, and
// adds what it exercised to seen. It stops the test at the first call
// whose answers differ.
func (d Differential) Trace(t *testing.T, seed uint64, ref, got redlimit.Store, clk *clock.Fake, seen *Outcomes) {
	t.Helper()
	d.defaults()
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	ctx := context.Background()
	clients := []string{"c0", "c1", "c2"}
	// Every trace sticks mostly to one algorithm, so that its state gets deep.
	algs := redlimit.Algorithms
	main := algs[rng.IntN(len(algs))]
	randConfig := func() redlimit.Config {
		c := redlimit.PerInterval(1+rng.Int64N(d.MaxRate), time.Duration(1+rng.Int64N(40))*time.Millisecond)
		if rng.IntN(6) == 0 {
			c.Rate = 1 + rng.Int64N(3000) // spacing down to a third of a µs
		}
		c.Algorithm = main
		if rng.IntN(5) == 0 {
			c.Algorithm = algs[rng.IntN(len(algs))]
		}
		switch c.Algorithm {
		case redlimit.TokenBucket:
			c.Burst = 1 + rng.Int64N(d.MaxParam)
		case redlimit.LeakyBucket:
			c.Capacity = 1 + rng.Int64N(d.MaxParam)
		}
		if rng.IntN(3) == 0 {
			c = c.WithMode(redlimit.PerClient)
		}
		return c
	}
	// The configs callers remember, per name, as each store last told them
	// (the epochs differ between stores: each makes its own).
	cfgs := map[string]redlimit.Config{}
	knownR, knownG := map[string]redlimit.Config{}, map[string]redlimit.Config{}
	learn := func(name string, r, g redlimit.Config) {
		if r.Rate != 0 && g.Rate != 0 {
			knownR[name], knownG[name] = r, g
		}
	}
	var pending []reservation
	drop := func(name string) {
		kept := pending[:0]
		for _, p := range pending {
			if p.name != name {
				kept = append(kept, p)
			}
		}
		pending = kept
	}
	fail := func(step int, op string, r, g any) {
		t.Helper()
		if d.Dump != nil {
			d.Dump(t)
		}
		t.Fatalf("seed %d step %d %s: reference %+v, store %+v", seed, step, op, r, g)
	}
	same := func(step int, op string, er, eg error) bool {
		t.Helper()
		if (er == nil) != (eg == nil) || (er != nil && !sameKind(er, eg)) {
			fail(step, op+" error", er, eg)
		}
		return er == nil
	}
	logf := func(format string, args ...any) {
		if d.Log {
			t.Logf(format, args...)
		}
	}
	set := func(step int, name string, how redlimit.SetMode) {
		cfgs[name] = randConfig()
		sr, okr, er := ref.SetConfig(ctx, name, cfgs[name], how)
		sg, okg, eg := got.SetConfig(ctx, name, cfgs[name], how)
		logf("step %d: set(%s, %v, %v) = %v %v / %v %v", step, name, cfgs[name], how, sr, okr, sg, okg)
		if same(step, "set", er, eg) && (okr != okg || !sr.SameLimit(sg)) {
			fail(step, "set", sr, sg)
		}
		learn(name, sr, sg)
	}
	for _, name := range d.Names {
		set(-1, name, redlimit.SetResetState)
	}
	for step := 0; step < d.Ops; step++ {
		name := d.Names[rng.IntN(len(d.Names))]
		client := clients[rng.IntN(len(clients))]
		key := redlimit.Key{Name: name, Client: client}
		cfg := cfgs[name]
		switch p := rng.IntN(100); {
		case p < 45: // acquire, maybe waiting
			n := 1 + rng.Int64N(min(cfg.MaxPermits(), 40)+1) // sometimes more than the most grantable
			if d.OnePermit && rng.IntN(4) > 0 {
				n = 1
			}
			wait := time.Duration(0)
			switch rng.IntN(4) {
			case 0:
				wait = time.Duration(rng.Int64N(d.MaxWait.Microseconds())) * time.Microsecond
			case 1:
				wait = -1
			}
			var local int64
			if d.Local != nil {
				local = d.Local()
			}
			dr, er := ref.Acquire(ctx, key, knownR[name], n, wait)
			dg, eg := got.Acquire(ctx, key, knownG[name], n, wait)
			hit := d.Local != nil && d.Local() > local
			logf("step %d t=%v: acquire(%s/%s, %d, %v) = %+v %v / %+v %v (local %v)", step, clk.Now().Sub(T0), name, client, n, wait, dr, er, dg, eg, hit)
			if !same(step, "acquire", er, eg) {
				switch {
				case errors.Is(er, redlimit.ErrNotInitialized):
					seen.NotInitialized++
				case errors.Is(er, redlimit.ErrPermitsExceedRate):
					seen.TooMany++
				}
				continue
			}
			switch {
			case dr.Full:
				seen.Full++
			case !dr.Granted:
				seen.Refused++
			case dr.Wait > 0:
				seen.Reserved++
			default:
				seen.Granted++
			}
			if hit {
				seen.LocalRefusals++
				if dr.Config.Algorithm == redlimit.LeakyBucket {
					seen.LocalLeaky++
				}
			}
			if !dr.Config.SameLimit(dg.Config) {
				fail(step, "acquire config", dr.Config, dg.Config)
			}
			learn(name, dr.Config, dg.Config)
			dr.Config, dg.Config = redlimit.Config{}, redlimit.Config{}
			// Decision.Cached marks the answers a refusal cache gave:
			// those its counter counted, and no other.
			if dr.Cached || d.Local != nil && dg.Cached != hit {
				fail(step, fmt.Sprintf("acquire(%s/%s) Cached, counted %v", name, client, hit), dr.Cached, dg.Cached)
			}
			dr.Cached, dg.Cached = false, false
			if wait == 0 {
				// A store may leave Full unset when no wait is
				// allowed (Decision.Full): memstore does.
				dr.Full, dg.Full = false, false
			}
			if dr != dg {
				fail(step, fmt.Sprintf("acquire(%s/%s, n=%d, wait=%v, local=%v)", name, client, n, wait, hit), dr, dg)
			}
			if dr.Granted && dr.Wait > 0 {
				pending = append(pending, reservation{name, client, dr.At, n})
			}
		case p < 53: // a waiter gives up, or (one time in four) every one
			if len(pending) == 0 {
				continue
			}
			gone := 1
			if rng.IntN(4) == 0 {
				gone = len(pending)
			}
			for range gone {
				i := rng.IntN(len(pending))
				res := pending[i]
				pending = append(pending[:i], pending[i+1:]...)
				k := redlimit.Key{Name: res.name, Client: res.client}
				gr, er := ref.Cancel(ctx, k, knownR[res.name], res.at, res.n)
				gg, eg := got.Cancel(ctx, k, knownG[res.name], res.at, res.n)
				logf("step %d: cancel(%+v) = %d/%d %v", step, res, gr, gg, er)
				if same(step, "cancel", er, eg) && gr != gg {
					fail(step, "cancel", gr, gg)
				}
				if gr > 0 {
					seen.Cancelled++
				}
			}
		case p < 60:
			n := 1 + rng.Int64N(max(cfg.Rate, cfg.Burst, cfg.Capacity))
			// No bound, or the oldest grant released made up to an
			// interval and a bit before now (or, from a clock ahead of
			// the store's, after it).
			var upTo time.Time
			if rng.IntN(4) > 0 {
				iv := cfg.Interval.Microseconds()
				upTo = clk.Now().Add(time.Duration(rng.Int64N(iv*5/4)-iv+iv/8) * time.Microsecond)
			}
			gr, er := ref.Release(ctx, key, knownR[name], n, upTo)
			gg, eg := got.Release(ctx, key, knownG[name], n, upTo)
			logf("step %d: release(%s/%s, %d, %v) = %d/%d %v", step, name, client, n, upTo, gr, gg, er)
			if same(step, "release", er, eg) && gr != gg {
				fail(step, "release", gr, gg)
			}
			if gr > 0 {
				seen.Released++
			}
		case p < 66:
			ar, cr, er := ref.Available(ctx, key, knownR[name])
			ag, cg, eg := got.Available(ctx, key, knownG[name])
			logf("step %d: available(%s/%s) = %d/%d %v", step, name, client, ar, ag, er)
			if same(step, "available", er, eg) && (ar != ag || !cr.SameLimit(cg)) {
				fail(step, "available", ar, ag)
			}
			learn(name, cr, cg)
		case p < 71: // SetRate, keeping or resetting the grants
			how := redlimit.SetKeepState
			if rng.IntN(3) == 0 {
				how = redlimit.SetResetState
				drop(name)
			}
			set(step, name, how)
		case p < 73: // data loss: the config and Overall state vanish
			or, er := ref.Delete(ctx, name)
			og, eg := got.Delete(ctx, name)
			logf("step %d: delete(%s) = %v/%v", step, name, or, og)
			if same(step, "delete", er, eg) && or != og {
				fail(step, "delete", or, og)
			}
			drop(name)
			if rng.IntN(2) == 0 {
				delete(knownR, name) // nobody remembers it: not initialized
				delete(knownG, name)
			} else {
				// Clients remember the config and restore it, with its epoch:
				// the PerClient state that survived still counts.
				seen.Restored++
			}
		case d.Expiry && p < 77: // the limiter expires a little later
			ttl := time.Duration(1+rng.Int64N(30)) * time.Millisecond
			if rng.IntN(2) == 0 {
				ttl += time.Duration(rng.Int64N(1000)) * time.Microsecond
			}
			or, er := ref.Expire(ctx, name, ttl)
			og, eg := got.Expire(ctx, name, ttl)
			logf("step %d: expire(%s, %v) = %v/%v", step, name, ttl, or, og)
			if same(step, "expire", er, eg) && or != og {
				fail(step, "expire", or, og)
			}
			if or {
				seen.Expired++
			}
		case d.Expiry && p < 79:
			or, er := ref.ClearExpire(ctx, name)
			og, eg := got.ClearExpire(ctx, name)
			if same(step, "clear expire", er, eg) && or != og {
				fail(step, "clear expire", or, og)
			}
		default: // time passes, by whole ms, by µs (or by ns)
			switch rng.IntN(3) {
			case 0:
				clk.Advance(time.Duration(rng.Int64N(25)) * time.Millisecond)
			case 1:
				clk.Advance(time.Duration(rng.Int64N(2000)) * time.Microsecond)
			default:
				if d.Nanoseconds {
					clk.Advance(time.Duration(rng.Int64N(2500)))
				} else {
					clk.Advance(time.Duration(rng.Int64N(2000)) * time.Microsecond)
				}
			}
		}
	}
}

func (d *Differential) defaults() {
	if len(d.Names) == 0 {
		d.Names = []string{"trace"}
	}
	if d.Ops <= 0 {
		d.Ops = 100
	}
	if d.MaxRate <= 0 {
		d.MaxRate = 12
	}
	if d.MaxParam <= 0 {
		d.MaxParam = 15
	}
	if d.MaxWait <= 0 {
		d.MaxWait = 60 * time.Millisecond
	}
}

// sameKind: both errors are of the same redlimit kind.
func sameKind(a, b error) bool {
	for _, kind := range []error{redlimit.ErrPermitsExceedRate, redlimit.ErrInvalidArgument, redlimit.ErrNotInitialized, redlimit.ErrConfigMismatch, redlimit.ErrUnavailable, redlimit.ErrCorrupt} {
		if errors.Is(a, kind) != errors.Is(b, kind) {
			return false
		}
	}
	return true
}
