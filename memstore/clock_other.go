//go:build !(linux && amd64)

package memstore

import "time"

// wallUS reads the system clock in µs.
func wallUS() int64 { return time.Now().UnixMicro() }
