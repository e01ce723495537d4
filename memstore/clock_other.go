//go:build !(linux && amd64)

package memstore

import "time"

// wallMS reads the system clock in ms.
func wallMS() int64 { return time.Now().UnixMilli() }
