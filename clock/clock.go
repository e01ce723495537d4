// Package clock lets time be injected: code that reads the time or waits takes
// a Clock, production passes Real, tests pass a *Fake they move by hand.
package clock

import (
	"sort"
	"sync"
	"time"
)

// Clock tells the time and makes timers.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that fires once after d, and a stop function
	// that releases it early (it reports whether the timer had not fired).
	NewTimer(d time.Duration) (<-chan time.Time, func() bool)
}

// Real is the system clock.
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// Fake is a Clock that moves only when told to. It is safe for concurrent use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	changed chan struct{} // closed and replaced whenever timers change
}

type fakeTimer struct {
	at time.Time
	ch chan time.Time
}

// NewFake returns a fake clock reading t.
func NewFake(t time.Time) *Fake {
	return &Fake{now: t, changed: make(chan struct{})}
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer that fires when the fake time reaches now+d.
func (f *Fake) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{at: f.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.ch <- f.now
		return t.ch, func() bool { return false }
	}
	f.timers = append(f.timers, t)
	f.notify()
	return t.ch, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		for i, x := range f.timers {
			if x == t {
				f.timers = append(f.timers[:i], f.timers[i+1:]...)
				f.notify()
				return true
			}
		}
		return false
	}
}

// Advance moves the time forward by d and fires the timers that are due, in
// order of their deadlines.
func (f *Fake) Advance(d time.Duration) {
	f.Set(f.Now().Add(d))
}

// Set moves the time to t (forwards or backwards) and fires the timers due.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = t
	sort.SliceStable(f.timers, func(i, j int) bool { return f.timers[i].at.Before(f.timers[j].at) })
	kept := f.timers[:0]
	for _, x := range f.timers {
		if !x.at.After(t) {
			x.ch <- t
		} else {
			kept = append(kept, x)
		}
	}
	f.timers = kept
	f.notify()
}

// Timers reports how many timers are waiting.
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// WaitForTimers blocks until at least n timers are waiting or done is closed;
// it reports whether n were reached. Tests use it instead of sleeping.
func (f *Fake) WaitForTimers(n int, done <-chan struct{}) bool {
	for {
		f.mu.Lock()
		count, changed := len(f.timers), f.changed
		f.mu.Unlock()
		if count >= n {
			return true
		}
		select {
		case <-changed:
		case <-done:
			return false
		}
	}
}

// notify wakes WaitForTimers; the caller holds f.mu.
func (f *Fake) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}
