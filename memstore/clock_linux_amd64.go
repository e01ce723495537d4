package memstore

import (
	"syscall"
	"time"
)

// wallUS reads the system clock in µs. gettimeofday is a vDSO call here that
// reads CLOCK_REALTIME alone, half the cost of time.Now, which reads the
// monotonic clock too (unused: the store works in wall-clock µs).
func wallUS() int64 {
	var tv syscall.Timeval
	if syscall.Gettimeofday(&tv) != nil {
		return time.Now().UnixMicro()
	}
	return tv.Sec*1_000_000 + tv.Usec
}
