package redisstore

import "github.com/redlimit/redlimit/internal/striped"

// counter is a counter that many callers add to at once (calls, script
// runs, hand-backs) without fighting over one cache line.
type counter = striped.Counter
