package memstore

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/redlimit/redlimit/algorithm"
	"github.com/redlimit/redlimit/algorithm/leakybucket"
	"github.com/redlimit/redlimit/algorithm/tokenbucket"
)

// TestHindexAsMap: a hindex holds what a Go map does over random adds and
// removals, one by one and by a walk (hashes drawn from a small set, so
// that probes collide and wrap around), each lookup and a full walk alike.
func TestHindexAsMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, spread := range []uint64{8, 300, 1 << 62} {
		var x hindex
		want := map[uint64]int32{}
		for step := range 50_000 {
			h := rng.Uint64N(spread) << rng.UintN(3)
			got := x.get(h)
			i, ok := want[h]
			if !ok {
				i = -1
			}
			if got != i {
				t.Fatalf("spread %d, step %d: get(%d) = %d, want %d", spread, step, h, got, i)
			}
			switch {
			case ok && rng.IntN(2) == 0:
				x.del(h)
				delete(want, h)
			case !ok:
				i := rng.Int32N(1 << 30)
				x.put(h, i)
				want[h] = i
			}
			if x.n != len(want) || x.n*4 > len(x.slots)*3 {
				t.Fatalf("spread %d, step %d: %d entries in %d slots; want %d entries", spread, step, x.n, len(x.slots), len(want))
			}
			if step%1000 == 999 {
				// Every third entry removed in one walk; each seen.
				seen, before := map[uint64]bool{}, x.n
				x.removeIf(func(h uint64, i int32) bool {
					seen[h] = true
					if h%3 != 0 {
						return false
					}
					delete(want, h)
					return true
				})
				if len(seen) != before {
					t.Fatalf("spread %d, step %d: removeIf saw %d of %d entries", spread, step, len(seen), before)
				}
			}
		}
		seen := 0
		for h, i := range x.all() {
			if w, ok := want[h]; !ok || w != i {
				t.Fatalf("spread %d: walk yields %d -> %d; want %d, %v", spread, h, i, w, ok)
			}
			seen++
		}
		if seen != len(want) {
			t.Fatalf("spread %d: walk yields %d entries, want %d", spread, seen, len(want))
		}
	}
}

// TestRecordsCompact: a compaction keeps every record held found by its
// key, its bytes its own, whether few are held (moved in place) or many
// (copied to another array), over rounds of keys made and removed.
func TestRecordsCompact(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, keep := range []int{1, 3, len(inPlace{}), len(inPlace{}) + 1, 40} {
		var rs records
		held := map[string]uint64{}
		for round := range 50 {
			for k := range 60 {
				key := strings.Repeat("k", 1+rng.IntN(9)) + strconv.Itoa(round*100+k)
				h := rng.Uint64()
				rs.add(h, key, record{owed: int64(len(key))})
				held[key] = h
			}
			// All but keep records removed, the kept ones anywhere.
			for key, h := range held {
				if len(held) <= keep {
					break
				}
				i, _ := rs.find(h, key)
				rs.remove(h, i)
				delete(held, key)
			}
			rs.compact()
			if rs.waste != 0 || rs.len() != len(held) {
				t.Fatalf("keep %d, round %d: %d records, %d bytes wasted; want %d, 0", keep, round, rs.len(), rs.waste, len(held))
			}
			for key, h := range held {
				i, taken := rs.find(h, key)
				if i < 0 || taken || rs.key(i) != key || rs.recs[i].owed != int64(len(key)) {
					t.Fatalf("keep %d, round %d: key %q not found as it was (%d, %v)", keep, round, key, i, taken)
				}
			}
		}
	}
}

// TestRecordForgotten: a record's forgotten is what the sweep asked of
// it decoded, Deficit.Forgotten under the shard's limit, for every
// record a bucket of that limit leaves, at instants around its expiry.
func TestRecordForgotten(t *testing.T) {
	var seen [2]int // answers false, true
	for _, lim := range []algorithm.Limit{
		{Rate: 10, Interval: 1_000_000, Burst: 10},
		{Rate: 1 << 30, Interval: 1_000_000, Burst: 1 << 30},
		{Rate: 3, Interval: 60_000_000, Burst: 7, Since: 1_000},
	} {
		for _, st := range []algorithm.State{new(tokenbucket.State), new(leakybucket.State)} {
			var now int64 = 1_000_000
			for step := range 40 {
				st.AcquireAt(now, lim, 1, 0, 0) // no wait: a state a record holds
				r, ok := encode(deficitOf(st), lim)
				if !ok {
					t.Fatalf("%v step %d: no record for %+v", lim, step, *deficitOf(st))
				}
				for _, at := range []int64{now, r.expiry - 1, r.expiry, r.expiry + 1, now + lim.Interval*2} {
					var d algorithm.Deficit
					r.decode(&d, lim)
					if got, want := r.forgotten(at), d.Forgotten(at, lim); got != want {
						t.Fatalf("%v record %+v at %d: forgotten %v, Deficit.Forgotten %v", lim, r, at, got, want)
					}
					if r.forgotten(at) {
						seen[1]++
					} else {
						seen[0]++
					}
				}
				now += int64(step%5) * lim.Interval / lim.Rate / 2
			}
		}
	}
	if seen[0] == 0 || seen[1] == 0 {
		t.Fatalf("answers false and true: %v, want both", seen)
	}
}
