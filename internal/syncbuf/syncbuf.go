// Package syncbuf is a text buffer safe for concurrent writes: the log
// or output destination of tests whose code writes from several
// goroutines while the test reads it.
package syncbuf

import (
	"strings"
	"sync"
)

// Buffer collects what is written to it; its zero value is empty and
// ready. Write and String may be called from any goroutine.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write appends p; it never fails.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
