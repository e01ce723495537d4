package redlimit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/memstore"
)

// expiring is a caller's context with a deadline an hour away, which the
// test passes itself, at the moment it chooses, as a loaded machine may.
type expiring struct {
	context.Context // values: none
	deadline        time.Time
	done            chan struct{}
	once            sync.Once
}

func newExpiring() *expiring {
	return &expiring{Context: context.Background(), deadline: time.Now().Add(time.Hour), done: make(chan struct{})}
}

func (e *expiring) Deadline() (time.Time, bool) { return e.deadline, true }
func (e *expiring) Done() <-chan struct{}       { return e.done }
func (e *expiring) expire()                     { e.once.Do(func() { close(e.done) }) }

func (e *expiring) Err() error {
	select {
	case <-e.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// lateFallback is a fallback store in whose Acquire the caller's deadline
// passes: the caller's goroutine was not scheduled in time.
type lateFallback struct {
	redlimit.Store
	caller *expiring
}

func (f *lateFallback) Acquire(ctx context.Context, key redlimit.Key, known redlimit.Config, n int64, maxWait time.Duration) (redlimit.Decision, error) {
	f.caller.expire()
	return f.Store.Acquire(ctx, key, known, n, maxWait)
}

// The store fails with time left; the deadline then passes before the
// fallback has decided. The caller still gets the fallback's answer, not
// a second error: the fallback decides without the deadline however late
// it runs (TestOutage in package breaker met this on a loaded machine).
func TestFallbackDecidesWhenTheDeadlinePassesMeanwhile(t *testing.T) {
	ctx := newExpiring()
	fallback := &lateFallback{Store: memstore.New(), caller: ctx}
	l := mustLimiter(t, &downStore{Store: memstore.New()}, "late", redlimit.PerInterval(10, time.Hour), redlimit.WithFallback(fallback, 0.5))
	r, err := l.TryAcquire(ctx, 1)
	if err != nil || !r.Allowed || !r.Degraded {
		t.Fatalf("TryAcquire with the deadline passing in the fallback: %+v, %v; want the fallback's grant", r, err)
	}
}
