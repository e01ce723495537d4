package redisstore

import (
	"math/rand/v2"
	"sync/atomic"
)

// counter is an int64 that many goroutines add to at once without fighting
// over one cache line: each Add goes to a random stripe, Load sums them. A
// single atomic counter cost a third of a locally answered refusal at 64
// callers.
type counter struct {
	stripes [8]struct {
		n atomic.Int64
		_ [56]byte // one stripe per cache line
	}
}

func (c *counter) Add(n int64) { c.stripes[rand.Uint32()%8].n.Add(n) }

func (c *counter) Load() int64 {
	var sum int64
	for i := range c.stripes {
		sum += c.stripes[i].n.Load()
	}
	return sum
}
