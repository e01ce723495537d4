//go:build !unix

package memstore_test

// processCPU is not measured here.
func processCPU() int64 { return 0 }
