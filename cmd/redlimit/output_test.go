package main

import (
	"testing"
	"time"
)

// TestShown: an answer's durations are printed to the millisecond, and
// to the microsecond below one, never with a store clock's nanoseconds.
func TestShown(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{981278 * time.Microsecond, "981ms"},
		{981500 * time.Microsecond, "982ms"},
		{time.Hour - 18722*time.Microsecond, "59m59.981s"},
		{time.Second, "1s"},
		{1234567 * time.Nanosecond, "1ms"},
		{999499 * time.Nanosecond, "999µs"},
		{1500 * time.Nanosecond, "2µs"},
		{-2500 * time.Microsecond, "-3ms"},
	} {
		if got := shown(c.d).String(); got != c.want {
			t.Errorf("shown(%v) = %s, want %s", c.d, got, c.want)
		}
	}
}
