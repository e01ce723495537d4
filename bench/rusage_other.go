//go:build !unix

package main

// processCPU is unknown here (no getrusage): the client CPU figures are
// left out.
func processCPU() (float64, bool) { return 0, false }
