package memstore

import (
	"hash/maphash"
	"math"
)

// hashMask is applied to keys' hashes; a test narrows it (keeping the
// bits that pick a shard) to make keys' hashes collide.
var hashMask = ^uint64(0)

// keyHash is key's hash: its low bits pick its shard, the whole finds its
// record there.
func (s *Store) keyHash(key string) uint64 { return maphash.String(s.seed, key) & hashMask }

// records are a shard's compact records (keyShard.c), kept where the
// garbage collector has nothing to scan: no pointer per key. The keys'
// bytes are back to back in one array, the records in another, and a
// table of each key's hash (hindex) finds its record; a key whose hash another key's
// record holds already keeps a whole state instead (keyShard.m).
type records struct {
	// idx: key hash (keyHash) -> index in recs.
	idx  hindex
	recs []slot
	// free lists the indexes of recs no record uses.
	free []int32
	keys []byte
	// waste counts the bytes of keys no record uses.
	waste int
	// spare is the keys' array before the last compaction, made the
	// next: keys made and swept by turns make no new one (small ones
	// only: a large one is seldom compacted).
	spare []byte
}

// maxSpare is the largest keys' array kept as a spare (records.spare).
const maxSpare = 1 << 14

// slot is a record and where its key's bytes are.
type slot struct {
	record
	off, n uint32 // keys[off : off+n]
}

// len is the number of records.
func (rs *records) len() int { return rs.idx.n }

// find returns the index of key's record (h its hash), or -1; taken
// reports whether another key's record holds h.
func (rs *records) find(h uint64, key string) (i int32, taken bool) {
	i = rs.idx.get(h)
	if i < 0 {
		return -1, false
	}
	if s := &rs.recs[i]; string(rs.keys[s.off:s.off+s.n]) != key {
		return -1, true
	}
	return i, false
}

// fits reports whether a record of a key of n bytes fits: its key's
// bytes within keys' 32-bit offsets, its index an int32.
func (rs *records) fits(n int) bool {
	return uint64(len(rs.keys))+uint64(n) <= math.MaxUint32 && len(rs.recs) < math.MaxInt32
}

// add keeps r as key's record (h its hash, held by no record; the key
// fits) and returns its index.
func (rs *records) add(h uint64, key string, r record) int32 {
	s := slot{record: r, off: uint32(len(rs.keys)), n: uint32(len(key))}
	rs.keys = append(rs.keys, key...)
	var i int32
	if n := len(rs.free); n > 0 {
		i, rs.free = rs.free[n-1], rs.free[:n-1]
		rs.recs[i] = s
	} else {
		i = int32(len(rs.recs))
		rs.recs = append(rs.recs, s)
	}
	rs.idx.put(h, i)
	return i
}

// remove drops record i, whose key's hash is h.
func (rs *records) remove(h uint64, i int32) {
	rs.idx.del(h)
	rs.free1(i)
}

// free1 makes record i's slot free, its key's bytes waste.
func (rs *records) free1(i int32) {
	rs.waste += int(rs.recs[i].n)
	rs.recs[i] = slot{}
	rs.free = append(rs.free, i)
}

// removeForgotten drops the records forgotten at t (record.forgotten),
// their test made in the walk's one call per entry (hindex.removeIf).
func (rs *records) removeForgotten(t int64) {
	rs.idx.removeIf(func(_ uint64, i int32) bool {
		if !rs.recs[i].forgotten(t) {
			return false
		}
		rs.free1(i)
		return true
	})
}

// key returns record i's key (a copy).
func (rs *records) key(i int32) string {
	s := &rs.recs[i]
	return string(rs.keys[s.off : s.off+s.n])
}

// compact drops the bytes of removed records' keys: a fresh array of
// the held records' keys (the spare, if it is as large), as large as the
// old one (the shard is still that busy), or the old one emptied when no
// record is held.
func (rs *records) compact() {
	if rs.idx.n == 0 {
		rs.recs, rs.free, rs.keys, rs.waste = rs.recs[:0], rs.free[:0], rs.keys[:0], 0
		return
	}
	if rs.idx.n <= len(inPlace{}) {
		rs.compactInPlace()
		return
	}
	keys := rs.spare[:0]
	if cap(keys) < cap(rs.keys) {
		keys = make([]byte, 0, cap(rs.keys))
	}
	for _, i := range rs.idx.all() {
		s := &rs.recs[i]
		k := rs.keys[s.off : s.off+s.n]
		s.off = uint32(len(keys))
		keys = append(keys, k...)
	}
	old := rs.keys
	rs.keys, rs.waste, rs.spare = keys, 0, nil
	if cap(old) <= maxSpare {
		rs.spare = old
	}
}

// inPlace is room for the records compactInPlace moves.
type inPlace [8]int32

// compactInPlace is compact for a few records held (the keys of a fast
// limit, made and swept by turns): their bytes moved to the front of the
// same array, in the order they are in it, so that none is overwritten
// before it moves.
func (rs *records) compactInPlace() {
	var by inPlace
	m := 0
	for _, i := range rs.idx.all() {
		j := m
		for ; j > 0 && rs.recs[by[j-1]].off > rs.recs[i].off; j-- {
			by[j] = by[j-1]
		}
		by[j] = i
		m++
	}
	n := 0
	for _, i := range by[:m] {
		s := &rs.recs[i]
		copy(rs.keys[n:], rs.keys[s.off:s.off+s.n])
		s.off = uint32(n)
		n += int(s.n)
	}
	rs.keys, rs.waste = rs.keys[:n], 0
}

// shrink makes the arrays and the map anew, of the records held: a Go map
// keeps its room when emptied, and removed records leave their slots.
func (rs *records) shrink() {
	if rs.idx.n == 0 {
		*rs = records{}
		return
	}
	var idx hindex
	idx.remake(rs.idx.n)
	recs := make([]slot, 0, rs.idx.n)
	keys := make([]byte, 0, len(rs.keys)-rs.waste)
	for h, i := range rs.idx.all() {
		s := rs.recs[i]
		k := rs.keys[s.off : s.off+s.n]
		s.off = uint32(len(keys))
		keys = append(keys, k...)
		idx.put(h, int32(len(recs)))
		recs = append(recs, s)
	}
	*rs = records{idx: idx, recs: recs, keys: keys}
}
