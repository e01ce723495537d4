package memstore

import (
	"sync/atomic"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/direct"
)

// keyHandle is a policy, bound (direct.KeyHandle): its name looked up
// until found, then never again (a name's policy is never replaced).
type keyHandle struct {
	s    *Store
	name string
	p    atomic.Pointer[policy]
}

// BindPolicy implements direct.KeyBinder, for package redlimit's Policy:
// its grants then skip the name's lookup and come back with their
// Result's Limits made. It is not for use elsewhere.
func (s *Store) BindPolicy(_ direct.Token, name string) direct.KeyHandle[redlimit.PolicyConfig, redlimit.LimitStatus] {
	return &keyHandle{s: s, name: name}
}

// Owner implements direct.KeyHandle.
func (h *keyHandle) Owner() any { return h.s }

// Take implements direct.KeyHandle: AcquireKey's common case (takeRecord).
func (h *keyHandle) Take(key string, n int64) ([]redlimit.LimitStatus, int64, int64, int64, *redlimit.PolicyConfig, bool) {
	p := h.p.Load()
	if p == nil {
		if p = h.s.policyOf(h.name, false); p == nil {
			return nil, 0, 0, 0, nil, false
		}
		h.p.Store(p)
	}
	if h.s.noTake {
		return nil, 0, 0, 0, nil, false
	}
	c, ks, rem, reset, now := h.s.takeRecord(p, key, n)
	if ks == nil {
		return nil, 0, 0, 0, nil, false
	}
	limits := ks.shownStatus(rem, reset)
	ks.mu.Unlock()
	return limits, rem, reset, now, &c.PolicyConfig, true
}
