package traffic

// topK counts the most frequent keys of a stream in bounded memory (the
// space-saving algorithm of Metwally, Agrawal and El Abbadi): at most k
// keys are kept; a new key when full takes the place of the least counted
// one (of those counted least, the first by name) and inherits its count,
// so a count may be over by at most the count it inherited, and a key
// with more than total/k hits is never lost.
//
// The keys are kept in a min-heap by count, so that the least counted is
// found at once: with many clients, most calls bring a key not kept.
type topK struct {
	k     int
	heap  []*keyCount          // heap[0] is the least counted
	index map[string]*keyCount // the same entries, by key
}

type keyCount struct {
	key string
	n   int64
	at  int // its place in heap
}

func newTopK(k int) *topK {
	return &topK{k: k, heap: make([]*keyCount, 0, k), index: make(map[string]*keyCount, k)}
}

func (t *topK) add(key string, n int64) {
	if e := t.index[key]; e != nil {
		e.n += n
		t.down(e.at)
		return
	}
	if len(t.heap) < t.k {
		e := &keyCount{key: key, n: n, at: len(t.heap)}
		t.heap = append(t.heap, e)
		t.index[key] = e
		t.up(e.at)
		return
	}
	if t.k == 0 {
		return
	}
	least := t.heap[0]
	delete(t.index, least.key)
	least.key, least.n = key, least.n+n
	t.index[key] = least
	t.down(0)
}

// each calls f with every key kept and its count.
func (t *topK) each(f func(key string, n int64)) {
	for _, e := range t.heap {
		f(e.key, e.n)
	}
}

func (t *topK) less(i, j int) bool {
	a, b := t.heap[i], t.heap[j]
	return a.n < b.n || a.n == b.n && a.key < b.key
}

func (t *topK) swap(i, j int) {
	t.heap[i], t.heap[j] = t.heap[j], t.heap[i]
	t.heap[i].at, t.heap[j].at = i, j
}

func (t *topK) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !t.less(i, parent) {
			return
		}
		t.swap(i, parent)
		i = parent
	}
}

func (t *topK) down(i int) {
	for {
		least := i
		if l := 2*i + 1; l < len(t.heap) && t.less(l, least) {
			least = l
		}
		if r := 2*i + 2; r < len(t.heap) && t.less(r, least) {
			least = r
		}
		if least == i {
			return
		}
		t.swap(i, least)
		i = least
	}
}
