package traffic

// topK counts the most frequent keys of a stream in bounded memory (the
// space-saving algorithm of Metwally, Agrawal and El Abbadi): at most k
// keys are kept; a new key when full takes the place of the least counted
// one and inherits its count, so a count may be over by at most the
// count it inherited, and a key with more than total/k hits is never lost.
type topK struct {
	k      int
	counts map[string]int64
}

func newTopK(k int) *topK { return &topK{k: k, counts: make(map[string]int64, k)} }

func (t *topK) add(key string, n int64) {
	if _, ok := t.counts[key]; ok || len(t.counts) < t.k {
		t.counts[key] += n
		return
	}
	minKey, minCount := "", int64(-1)
	for k, c := range t.counts {
		if minCount < 0 || c < minCount || (c == minCount && k < minKey) {
			minKey, minCount = k, c
		}
	}
	delete(t.counts, minKey)
	t.counts[key] = minCount + n
}
