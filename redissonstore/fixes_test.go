package redissonstore

import (
	"encoding/binary"
	"time"

	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/redisstore"
)

// TestNoCounterWithoutTTL: under keepAliveTime (or a TTL set by Expire) a
// call that creates the counter gives it the limiter's TTL, so that no key
// outlives the limiter: a release of nothing and an availablePermits used
// to leave {name}:value without one.
func TestNoCounterWithoutTTL(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name string
		s    *Store
		set  func(l *redlimit.Limiter) error
	}{
		{"keepalive", e.store(WithKeepAlive(time.Hour)), func(l *redlimit.Limiter) error {
			_, err := l.TrySetRate(e.ctx, redlimit.PerInterval(2, time.Minute))
			return err
		}},
		{"expire", e.store(), func(l *redlimit.Limiter) error {
			if err := l.SetRate(e.ctx, redlimit.PerInterval(2, time.Minute)); err != nil {
				return err
			}
			_, err := l.Expire(e.ctx, time.Hour)
			return err
		}},
	} {
		for _, call := range []string{"release", "available"} {
			name := tc.name + "-" + call
			if err := tc.set(e.limiter(tc.s, name)); err != nil {
				t.Fatal(err)
			}
			key := redlimit.Key{Name: name, Client: "c"}
			var err error
			if call == "release" {
				_, err = tc.s.Release(e.ctx, key, redlimit.Config{}, 1, time.Time{})
			} else {
				_, _, err = tc.s.Available(e.ctx, key, redlimit.Config{})
			}
			if err != nil {
				t.Fatal(err)
			}
			k := KeysOf(name)
			if n := e.rdb.Exists(e.ctx, k.Value).Val(); n == 0 {
				continue // nothing written: nothing to outlive the limiter
			}
			if d := e.rdb.PTTL(e.ctx, k.Value).Val(); d <= 59*time.Minute {
				t.Errorf("%s: %s left with TTL %v; want the limiter's hour", name, k.Value, d)
			}
		}
	}
}

// member packs a current-layout grant of permits.
func member(random string, permits uint32) string {
	var p [4]byte
	binary.LittleEndian.PutUint32(p[:], permits)
	return string([]byte{byte(len(random))}) + random + string(p[:])
}

// redissonState writes a Redisson limiter of rate per 10 s by hand: the
// config hash, the counter and the grants (permits at an offset from t0).
func (e *env) redissonState(name string, rate, value int64, grants map[time.Duration]uint32) {
	e.t.Helper()
	k := KeysOf(name)
	e.rdb.HSet(e.ctx, k.Config, "rate", rate, "interval", 10_000, "type", "0")
	e.rdb.Set(e.ctx, k.Value, value, 0)
	i := 0
	for at, p := range grants {
		e.rdb.ZAdd(e.ctx, k.Permits, redis.Z{Score: float64(t0.Add(at).UnixMilli()), Member: member(string(rune('a'+i)), p)})
		i++
	}
}

// TestMigrateCarriesNewest: when Redisson's log holds more than it counts
// as in use, Migrate carries the newest grants (which Redisson frees last),
// and never the permits its counter says are free.
func TestMigrateCarriesNewest(t *testing.T) {
	e := newEnv(t)
	native, err := redisstore.New(e.rdb, redisstore.WithTimeSource(e.clk), redisstore.WithPrefix("native:"))
	if err != nil {
		t.Fatal(err)
	}
	s := e.store()
	e.clk.Set(t0.Add(6 * time.Second))

	// After a keep-state rate cut 4 -> 3: 2 permits at t0 and 2 at t0+4s.
	e.redissonState("cut", 3, 0, map[time.Duration]uint32{0: 2, 4 * time.Second: 2})
	mig, err := s.Migrate(e.ctx, "cut", native)
	if err != nil {
		t.Fatal(err)
	}
	if st := mig.States[0]; st.Carried != 3 || st.Dropped != 1 || st.Grants != 2 {
		t.Fatalf("cut: migrated %+v; want 3 carried (t0+4s's 2 and 1 of t0's), 1 dropped", st)
	}
	l := e.limiter(native, "cut")
	e.clk.Set(t0.Add(10 * time.Second)) // t0's grant ages out: 1 permit of it was carried
	if r := e.try(l, 1); !r.Allowed {
		t.Fatalf("cut: at t0+10s %+v", r)
	}
	if r := e.try(l, 1); r.Allowed || r.RetryAfter != 4*time.Second {
		t.Fatalf("cut: a second permit at t0+10s: %+v; want refused until t0+14s (the oldest grant was carried instead of the newest)", r)
	}

	// A Java release handed 2 permits back to the counter (value 2), while
	// the log still holds 1 at t0 and 2 at t0+4s: 1 permit is in use.
	e.clk.Set(t0.Add(6 * time.Second))
	e.redissonState("released", 3, 2, map[time.Duration]uint32{0: 1, 4 * time.Second: 2})
	mig, err = s.Migrate(e.ctx, "released", native)
	if err != nil {
		t.Fatal(err)
	}
	if st := mig.States[0]; st.Carried != 1 || st.Dropped != 2 {
		t.Fatalf("released: migrated %+v; want 1 carried, 2 dropped", st)
	}
	if n, err := e.limiter(native, "released").AvailablePermits(e.ctx); err != nil || n != 2 {
		t.Fatalf("released: %d available after the migration, %v; want 2 as in Redisson", n, err)
	}
	if n, err := e.limiter(s, "released").AvailablePermits(e.ctx); err != nil || n != 2 {
		t.Fatalf("released: Redisson's own count %d, %v; want 2", n, err)
	}
}
