package traffic

import (
	"strconv"
	"testing"
)

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
	if len(tk.counts) != 8 {
		t.Fatalf("%d keys kept, want 8", len(tk.counts))
	}
	if tk.counts["heavy-a"] < 250 || tk.counts["heavy-b"] < 200 {
		t.Fatalf("heavy hitters lost or undercounted: %v", tk.counts)
	}
}
