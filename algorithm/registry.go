package algorithm

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Bounds every algorithm shares, chosen so that every value stays exact as
// a Lua number (a float64: integers up to 2^53).
const (
	// MaxRate bounds Rate, Burst and Capacity.
	MaxRate int64 = 1 << 40
	// MinInterval is the shortest Interval of every algorithm built in.
	// Intervals are whole milliseconds: that is how a config is stored.
	MinInterval time.Duration = time.Millisecond
	// MaxInterval is the longest Interval of any algorithm.
	MaxInterval time.Duration = 100 * 365 * 24 * time.Hour
	// MaxBucketInterval is the longest Interval of the algorithms whose
	// arithmetic multiplies counts by microseconds (the sliding counter and
	// the buckets).
	MaxBucketInterval time.Duration = 24 * time.Hour
	// MaxExact is the largest integer a Lua number holds exactly: the
	// bound on a count times an Interval for those algorithms.
	MaxExact int64 = 1 << 53
)

// Param is a set of the parameters of a Limit beyond Rate and Interval.
type Param uint8

// The parameters an algorithm may take.
const (
	// Burst is Limit.Burst (Config.Burst).
	Burst Param = 1 << iota
	// Capacity is Limit.Capacity (Config.Capacity).
	Capacity
)

// String names the parameters: "burst", "capacity", "burst+capacity", or
// "" for none.
func (p Param) String() string {
	var names []string
	if p&Burst != 0 {
		names = append(names, "burst")
	}
	if p&Capacity != 0 {
		names = append(names, "capacity")
	}
	return strings.Join(names, "+")
}

// Spec is what the rest of redlimit knows of an algorithm: its names, its
// state, its limits, its defaults and what a SetRate keeping the state does
// to it. Each algorithm's package declares its Spec once; stores, the
// config's checks, the command line and the tests read it from the
// registry (Register, Lookup, All), never from a list of their own.
type Spec struct {
	// Name is the algorithm as users write it: "token-bucket". Lower case.
	Name string
	// Package is the name of its Go package, and the base name of its Lua
	// file (redisstore/scripts/<Package>.lua): "tokenbucket".
	Package string
	// Summary is one line for help texts: what it promises, in the
	// words of its config (rate, interval, burst, capacity).
	Summary string
	// New returns a fresh State: the zero value of the algorithm's State.
	New func() State
	// Unit is the unit of time of its rules (Limit.Interval, Since, now,
	// waits): time.Microsecond or time.Millisecond (see the package doc).
	Unit time.Duration
	// Params lists the parameters it takes beyond Rate and Interval;
	// a config giving another is refused.
	Params Param
	// Defaults fills the parameters of Params left zero (nil: none has a
	// default). Only the fields of Params are read back.
	Defaults func(lim Limit) Limit
	// MaxPermits is the most permits one request can ever be granted
	// under lim (its defaults filled in); nil means lim.Rate.
	MaxPermits func(lim Limit) int64
	// MinInterval and MaxInterval bound the Interval (MinInterval and
	// MaxInterval of this package, or tighter).
	MinInterval, MaxInterval time.Duration
	// MaxCountTimesInterval, when not zero, bounds Rate and each of
	// Params times the Interval in Unit: the algorithms whose arithmetic
	// multiplies counts by time take MaxExact.
	MaxCountTimesInterval int64
	// SetRate says in one line what a SetRate keeping the state does to
	// it (the package doc says more).
	SetRate string
	// Since says that its state accounts the time before Limit.Since at
	// the config it was last changed under. A store then brings the
	// Overall state to a SetRate keeping it at once (Release of 0 at the
	// change), so that a second change before any call does not lose the
	// first.
	Since bool
	// Full, when not nil, reports whether a request of n permits refused
	// at now would be refused even with no bound on its wait (a leaky
	// bucket's full queue: the Limiter's ErrQueueFull). It changes
	// nothing, and answers false for a State not the algorithm's. Nil: a
	// request that may wait for ever is always granted.
	Full func(st State, now int64, lim Limit, n int64) bool
	// ReleaseUpTo, when not nil, hands back up to n permits granted at
	// or before upTo (State.Release hands back any; so does this, given a
	// State not the algorithm's); nil: the algorithm's permits are
	// interchangeable, and a store calls State.Release.
	ReleaseUpTo func(st State, now int64, lim Limit, n, upTo int64) int64
}

// Max is the most permits one request can be granted under lim.
func (s *Spec) Max(lim Limit) int64 {
	if s.MaxPermits == nil {
		return lim.Rate
	}
	return s.MaxPermits(lim)
}

// UnitName is the symbol of the spec's unit of time: "µs" or "ms".
func (s *Spec) UnitName() string {
	if s.Unit == time.Millisecond {
		return "ms"
	}
	return strings.TrimPrefix(s.Unit.String(), "1")
}

// registry is an immutable snapshot: Register replaces it whole, so that
// Lookup, All and Of take no lock. Lookup scans all: with a handful of
// names a scan is as fast as a switch and faster than hashing, and
// Config.Normalize, which a Redis store runs on every call, looks up.
type registry struct {
	all    []*Spec
	byType map[reflect.Type]*Spec
}

var (
	current atomic.Pointer[registry]
	// registerMu serializes Register's copy-and-replace.
	registerMu sync.Mutex
)

// Register adds an algorithm to the registry, after those registered
// before it: All lists them in that order. The root package redlimit
// registers the algorithms built in (in its algorithms.go, the default
// first), so the registry is full wherever redlimit is imported.
//
// It is meant for package initialization and tests, and is safe to call
// concurrently with readers. A spec that is incomplete (no name, package,
// state, unit or interval bounds), or that repeats a registered name,
// package or State type, panics: that is a mistake in the program, found
// the first time it runs.
func Register(s Spec) *Spec {
	switch {
	case s.Name == "" || s.Name != strings.ToLower(s.Name) || strings.ContainsAny(s.Name, " \t\n"):
		panic(fmt.Sprintf("algorithm.Register: bad name %q (lower case, no spaces)", s.Name))
	case s.Package == "":
		panic("algorithm.Register: " + s.Name + " has no package")
	case s.New == nil || s.New() == nil:
		panic("algorithm.Register: " + s.Name + " has no State")
	case s.Unit != time.Microsecond && s.Unit != time.Millisecond:
		panic("algorithm.Register: " + s.Name + ": unit must be time.Microsecond or time.Millisecond")
	case s.MinInterval < MinInterval || s.MaxInterval < s.MinInterval || s.MaxInterval > MaxInterval:
		panic("algorithm.Register: " + s.Name + ": interval bounds outside MinInterval..MaxInterval")
	}
	registerMu.Lock()
	defer registerMu.Unlock()
	old := current.Load()
	if old == nil {
		old = &registry{}
	}
	typ := reflect.TypeOf(s.New())
	for _, o := range old.all {
		if o.Name == s.Name || o.Package == s.Package || reflect.TypeOf(o.New()) == typ {
			panic("algorithm.Register: " + s.Name + " repeats the name, package or State of " + o.Name)
		}
	}
	p := &s
	r := &registry{
		all:    append(append([]*Spec(nil), old.all...), p),
		byType: make(map[reflect.Type]*Spec, len(old.all)+1),
	}
	for _, o := range r.all {
		r.byType[reflect.TypeOf(o.New())] = o
	}
	current.Store(r)
	return p
}

// Lookup returns the algorithm called name (exactly, lower case), or nil.
// The Spec is shared: callers read it and never change it.
func Lookup(name string) *Spec {
	if r := current.Load(); r != nil {
		for _, s := range r.all {
			if s.Name == name {
				return s
			}
		}
	}
	return nil
}

// All returns every algorithm registered, in the order of registration:
// the built-in ones in the order of redlimit.Algorithms (the default
// first), then any registered later. The slice is the caller's; the Specs
// are shared.
func All() []*Spec {
	r := current.Load()
	if r == nil {
		return nil
	}
	return append([]*Spec(nil), r.all...)
}

// Of returns the algorithm whose State st is, or nil: a store holding a
// state of an older config finds its unit of time this way.
func Of(st State) *Spec {
	if r := current.Load(); r != nil && st != nil {
		return r.byType[reflect.TypeOf(st)]
	}
	return nil
}
