package memstore

import (
	"syscall"
	"time"
)

// wallMS reads the system clock in ms. gettimeofday is a vDSO call here that
// reads CLOCK_REALTIME alone, half the cost of time.Now, which reads the
// monotonic clock too (unused: the store works in wall-clock ms).
func wallMS() int64 {
	var tv syscall.Timeval
	if syscall.Gettimeofday(&tv) != nil {
		return time.Now().UnixMilli()
	}
	return tv.Sec*1000 + tv.Usec/1000
}
