package memstore

import (
	"iter"
	"math/bits"
)

// hindex finds a record by its key's hash (keyHash): an open-addressing
// table probed linearly, in one array of plain words (nothing for the
// garbage collector to scan), looked up inline where a Go map's lookup
// is a call of many steps. A removal moves back the entries after it
// that probed past it (no tombstones), so that keys made and swept by
// turns never make the table anew. The zero value is empty.
type hindex struct {
	// slots: a power of two of them, or none; at most 3/4 used, so that
	// a probe always ends at an empty one.
	slots []hslot
	// shift takes a hash's top bits to a slot (64 - log2 len(slots)).
	shift uint8
	// n counts the entries.
	n int
}

// hslot is one slot of a hindex.
type hslot struct {
	h uint64
	// i is the record's index + 1, or emptySlot.
	i uint32
}

const emptySlot = 0

// home is where h's probe starts: the top bits of h mixed (Fibonacci
// hashing), as the low bits picked the shard.
func (x *hindex) home(h uint64) uint64 { return (h * 0x9e3779b97f4a7c15) >> x.shift }

// get returns the index of h's record, or -1.
func (x *hindex) get(h uint64) int32 {
	if len(x.slots) == 0 {
		return -1
	}
	mask := uint64(len(x.slots) - 1)
	for p := x.home(h); ; p = (p + 1) & mask {
		s := &x.slots[p]
		if s.i == emptySlot {
			return -1
		}
		if s.h == h {
			return int32(s.i - 1)
		}
	}
}

// put adds h's record, index i (h holds none).
func (x *hindex) put(h uint64, i int32) {
	if (x.n+1)*4 > len(x.slots)*3 {
		x.remake(x.n + 1)
	}
	mask := uint64(len(x.slots) - 1)
	for p := x.home(h); ; p = (p + 1) & mask {
		if s := &x.slots[p]; s.i == emptySlot {
			s.h, s.i = h, uint32(i)+1
			x.n++
			return
		}
	}
}

// del removes h's record (held).
func (x *hindex) del(h uint64) {
	mask := uint64(len(x.slots) - 1)
	p := x.home(h)
	for x.slots[p].h != h || x.slots[p].i == emptySlot {
		p = (p + 1) & mask
	}
	x.drop(p)
}

// drop empties slot p (an entry's), moving back into it each entry after
// it whose probe passed it, and into the slot that one left the next.
func (x *hindex) drop(p uint64) {
	mask := uint64(len(x.slots) - 1)
	for q := (p + 1) & mask; x.slots[q].i != emptySlot; q = (q + 1) & mask {
		// p lies on the probe from the entry's home to q.
		if home := x.home(x.slots[q].h); (q-home)&mask >= (q-p)&mask {
			x.slots[p] = x.slots[q]
			p = q
		}
	}
	x.slots[p] = hslot{}
	x.n--
}

// removeIf removes each entry (a hash and its record's index) drop
// reports true for. drop sees every entry, some twice (moved back past
// the end by a removal): it must answer alike.
func (x *hindex) removeIf(drop func(h uint64, i int32) bool) {
	for k := 0; k < len(x.slots); {
		if s := &x.slots[k]; s.i != emptySlot && drop(s.h, int32(s.i-1)) {
			x.drop(uint64(k))
			continue // another may have moved into k
		}
		k++
	}
}

// all yields each entry: a hash and its record's index. Nothing is to be
// added or removed meanwhile.
func (x *hindex) all() iter.Seq2[uint64, int32] {
	return func(yield func(uint64, int32) bool) {
		for k := range x.slots {
			if s := &x.slots[k]; s.i != emptySlot && !yield(s.h, int32(s.i-1)) {
				return
			}
		}
	}
}

// remake makes the table anew, with room for n entries at most half full.
func (x *hindex) remake(n int) {
	old := x.slots
	size := 8
	if n > 4 {
		size = 1 << bits.Len(uint(2*n-1))
	}
	*x = hindex{slots: make([]hslot, size), shift: uint8(64 - bits.TrailingZeros(uint(size)))}
	for k := range old {
		if s := &old[k]; s.i != emptySlot {
			x.put(s.h, int32(s.i-1))
		}
	}
}
