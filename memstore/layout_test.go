package memstore

import (
	"testing"
	"unsafe"
)

// TestLimiterLayout holds the layout limiter's doc describes: a token
// bucket limiter's lock and the state fields its common grant reads and
// writes (tokenbucket.State's Take: Deficit's Owed to Live) in one cache
// line, in every limiter made; every other limiter's lock at a line's
// start too. A field added to limiter in the wrong place moves the lock
// off that line and costs contending callers a line passed between CPUs
// per call; this names the field's place instead.
func TestLimiterLayout(t *testing.T) {
	const line = 64
	var b bucketLimiter
	mu := unsafe.Offsetof(b.limiter.mu)
	if mu%line != 0 {
		t.Errorf("limiter.mu at byte %d, not at a cache line's start: the fields before it are %d bytes, want a multiple of %d", mu, mu, line)
	}
	tb := unsafe.Offsetof(b.tb)
	hotEnd := tb + unsafe.Offsetof(b.tb.Live) + unsafe.Sizeof(b.tb.Live)
	if hotEnd > mu+line {
		t.Errorf("the bucket's Owed..Live end at byte %d, past the lock's line [%d, %d)", hotEnd, mu, mu+line)
	}
	if size := unsafe.Sizeof(b); size%line != 0 {
		t.Errorf("bucketLimiter is %d bytes, not a multiple of %d: its size class would not start every object on a line", size, line)
	}
	if size := unsafe.Sizeof(plainLimiter{}); size%line != 0 {
		t.Errorf("plainLimiter is %d bytes, not a multiple of %d: half its objects would start mid-line", size, line)
	}
	// The size classes keep that promise for the limiters made, of
	// either kind.
	for _, how := range []making{createBucket, create} {
		for range 100 {
			l := newLimiter(how)
			if at := uintptr(unsafe.Pointer(&l.mu)); at%line != 0 {
				t.Fatalf("a made limiter's lock at %#x, not at a line's start (making %d)", at, how)
			}
		}
	}
}
