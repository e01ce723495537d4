package traffic

import (
	"maps"
	"math/rand/v2"
	"strconv"
	"testing"
)

// counts returns the keys kept and their counts.
func (t *topK) counts() map[string]int64 {
	out := map[string]int64{}
	t.each(func(k string, n int64) { out[k] = n })
	return out
}

// TestTopKKeepsHeavyHitters: with many light keys flowing past, the keys
// with more than total/k hits stay, with at least their true count.
func TestTopKKeepsHeavyHitters(t *testing.T) {
	tk := newTopK(8)
	for i := range 1000 {
		tk.add("light-"+strconv.Itoa(i), 1)
		if i%4 == 0 {
			tk.add("heavy-a", 1)
		}
		if i%5 == 0 {
			tk.add("heavy-b", 1)
		}
	}
	counts := tk.counts()
	if len(counts) != 8 {
		t.Fatalf("%d keys kept, want 8", len(counts))
	}
	if counts["heavy-a"] < 250 || counts["heavy-b"] < 200 {
		t.Fatalf("heavy hitters lost or undercounted: %v", counts)
	}
}

// TestTopKEvictsLeastCountedFirstByName: the key a new one replaces is
// the least counted, of those the first by name, as a scan of every key
// would choose, on random streams.
func TestTopKEvictsLeastCountedFirstByName(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		k := 1 + rng.IntN(10)
		tk := newTopK(k)
		want := map[string]int64{}
		for range 2000 {
			key := "k" + strconv.Itoa(rng.IntN(40))
			n := int64(1 + rng.IntN(3))
			tk.add(key, n)
			scanAdd(want, k, key, n)
			if got := tk.counts(); !maps.Equal(got, want) {
				t.Fatalf("seed %d, k %d, after %s+%d: %v, want %v", seed, k, key, n, got, want)
			}
		}
	}
}

// scanAdd is space-saving by a scan of every key: the model.
func scanAdd(counts map[string]int64, k int, key string, n int64) {
	if _, ok := counts[key]; ok || len(counts) < k {
		counts[key] += n
		return
	}
	minKey, minCount := "", int64(-1)
	for k, c := range counts {
		if minCount < 0 || c < minCount || (c == minCount && k < minKey) {
			minKey, minCount = k, c
		}
	}
	delete(counts, minKey)
	counts[key] = minCount + n
}
