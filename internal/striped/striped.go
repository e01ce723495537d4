// Package striped holds a counter that many goroutines add to at once
// without fighting over one cache line.
package striped

import (
	"math/rand/v2"
	"sync/atomic"
)

// Counter is an int64 that many goroutines add to at once: each Add goes
// to a random stripe, Load sums them. On a hot path taken by many callers
// (a locally answered refusal) one shared atomic would cost as much as the
// rest of the call. The zero value is ready to use.
type Counter struct {
	stripes [8]struct {
		n atomic.Int64
		_ [56]byte // one stripe per cache line
	}
}

// Add adds n.
func (c *Counter) Add(n int64) { c.stripes[rand.Uint32()%8].n.Add(n) }

// Load returns the sum of every Add so far.
func (c *Counter) Load() int64 {
	var sum int64
	for i := range c.stripes {
		sum += c.stripes[i].n.Load()
	}
	return sum
}
