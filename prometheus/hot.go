package redlimitprom

import (
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// hotKeys finds the keys asked most often with the space-saving summary
// (Metwally, Agrawal, El Abbadi, 2005): it counts at most size keys; a
// key not counted takes the place of the least counted one, with that
// count plus one, so a key asked often enough always gets in, and the
// memory is bounded whatever the number of keys. A key is hot when its
// count is among the top of them.
type hotKeys struct {
	mu     sync.Mutex
	top    int
	counts map[hotKey]int64
	// threshold is the count of the top-th key, recomputed every
	// recompute observations (a sort per call would cost more than the
	// call observed).
	threshold int64
	since     int
}

type hotKey struct{ name, key string }

const recompute = 256

func newHotKeys(top int) *hotKeys {
	return &hotKeys{top: top, counts: make(map[hotKey]int64, 4*top)}
}

// exemplarEvery is how often a hot key's calls update its exemplar: a
// series keeps only its last one, and each costs allocations.
const exemplarEvery = 16

// count counts one call for key of name and reports whether the call is
// to update the exemplar: every exemplarEvery-th call of a hot key.
func (h *hotKeys) count(name, key string) bool {
	k := hotKey{name, key}
	h.mu.Lock()
	defer h.mu.Unlock()
	n, ok := h.counts[k]
	if !ok && len(h.counts) >= 4*h.top {
		var least hotKey
		n = -1
		for kk, c := range h.counts {
			if n < 0 || c < n {
				least, n = kk, c
			}
		}
		delete(h.counts, least)
	}
	n++
	h.counts[k] = n
	if h.since++; h.since >= recompute || h.threshold == 0 {
		h.since = 0
		h.threshold = h.kth()
	}
	return n >= h.threshold && n%exemplarEvery == 0
}

// kth is the top-th largest count (the least, when fewer are counted).
func (h *hotKeys) kth() int64 {
	cs := make([]int64, 0, len(h.counts))
	for _, c := range h.counts {
		cs = append(cs, c)
	}
	// A partial selection would do; the summary is small.
	for i := 0; i < len(cs) && i < h.top; i++ {
		for j := i + 1; j < len(cs); j++ {
			if cs[j] > cs[i] {
				cs[i], cs[j] = cs[j], cs[i]
			}
		}
	}
	return cs[min(h.top, len(cs))-1]
}

// maxExemplarKey bounds a key shown in an exemplar, in runes: an
// exemplar's labels may hold prometheus.ExemplarMaxRunes in all.
const maxExemplarKey = prometheus.ExemplarMaxRunes - len("key") - 1

// exemplarValue is key as an exemplar label may hold it: valid UTF-8
// (a key is any bytes: one that is not UTF-8 is shown Go-quoted), cut to
// maxExemplarKey runes.
func exemplarValue(key string) string {
	if !utf8.ValidString(key) {
		key = strconv.Quote(key)
	}
	if utf8.RuneCountInString(key) <= maxExemplarKey {
		return key
	}
	r := []rune(key)
	return string(r[:maxExemplarKey-1]) + "…"
}
