package storetest

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/redlimit/redlimit"
)

// Capabilities is what a store can do. Run runs every case whose needs the
// store meets and skips the others, naming what they need (go test -v
// lists them), so that a store that does less still runs every case that
// applies to it. A field false is a capability the store lacks; the least
// any store does (every case needs it) is one algorithm, Overall and
// PerClient limits, Release, Delete, Expire and self-healing configs, and
// waits that may poll.
type Capabilities struct {
	// Algorithms are the algorithms the store holds; at least one, each
	// one of redlimit.Algorithms. Cases written for one algorithm run only
	// when the store holds it, and a case that holds for every algorithm
	// runs once per algorithm held, each as a subtest named after it.
	Algorithms []redlimit.Algorithm
	// Reservations: a caller that must wait reserves its permits in the
	// store at once, so waiters are served in the order they asked, and a
	// bound on the wait (WithMaxWait) refuses at once a grant due beyond
	// it. Without them waiters poll: each sleeps the retry-after it was
	// told and asks again, in no order.
	Reservations bool
	// ExactRetryAfter: a refusal's RetryAfter is exactly the wait until the
	// permits asked for are free: a millisecond earlier they are still
	// refused, at it they are granted.
	ExactRetryAfter bool
	// MonotonicTime: the calls on one limiter are decided at times that
	// never decrease (the store's own time, or the latest it has seen),
	// so callers that read their clocks a moment before another's call
	// landed, or whose clocks disagree, never admit more than the rate.
	MonotonicTime bool
	// ConfigEpochs: a stored config carries an epoch (Config.Epoch, not
	// zero) that tells one stored config from the next.
	ConfigEpochs bool
	// ResetsEveryClient: SetRate with ResetState empties the state of
	// every client of a PerClient limiter, not only the caller's.
	ResetsEveryClient bool
	// DistinctNames: every name has a state of its own, whatever bytes it
	// holds: no two names ever share a limit.
	DistinctNames bool
	// Policies: the store keeps keyed, multi-limit policies (it implements
	// redlimit.PolicyStore; a store that does not skips their cases,
	// saying so).
	Policies bool
}

// Full is the capabilities of a store that has every one, with every
// algorithm of redlimit.Algorithms. memstore and redisstore
// have them; a capability added to the suite is added here too, so that
// such stores run its cases without a change.
func Full() Capabilities {
	return Capabilities{
		Algorithms:        slices.Clone(redlimit.Algorithms),
		Reservations:      true,
		ExactRetryAfter:   true,
		MonotonicTime:     true,
		ConfigEpochs:      true,
		ResetsEveryClient: true,
		DistinctNames:     true,
		Policies:          true,
	}
}

// holds reports whether the store holds algorithm a.
func (c Capabilities) holds(a redlimit.Algorithm) bool {
	return slices.Contains(c.Algorithms, a)
}

// check reports a declaration Run cannot use.
func (c Capabilities) check() error {
	if len(c.Algorithms) == 0 {
		return fmt.Errorf("storetest: Capabilities.Algorithms is empty; a store holds at least one algorithm")
	}
	for _, a := range c.Algorithms {
		if !slices.Contains(redlimit.Algorithms, a) {
			return fmt.Errorf("storetest: Capabilities.Algorithms holds %q, not one of %v", a, redlimit.Algorithms)
		}
	}
	return nil
}

// needs is what a case needs of a store beyond the least every store
// does, in Capabilities' terms: Algorithms are those the case is written
// for (every one of them; none: it runs once per algorithm the store holds,
// or needs none in particular), each field true a capability it needs.
type needs = Capabilities

// unmet names what a case that needs n lacks in a store that has c ("" :
// nothing).
func unmet(n, c Capabilities) string {
	var lacks []string
	for _, a := range n.Algorithms {
		if !c.holds(a) {
			lacks = append(lacks, "algorithm "+string(a))
		}
	}
	need, has := reflect.ValueOf(n), reflect.ValueOf(c)
	for i := range need.NumField() {
		if f := need.Type().Field(i); f.Type.Kind() == reflect.Bool && need.Field(i).Bool() && !has.Field(i).Bool() {
			lacks = append(lacks, f.Name)
		}
	}
	if len(lacks) == 0 {
		return ""
	}
	return "needs " + strings.Join(lacks, " and ") + ", which the store lacks"
}

// testCase is one case of the suite: fn runs it once, each runs it once
// per algorithm the store holds (one of them is set).
type testCase struct {
	name  string
	needs needs
	fn    func(*env)
	each  func(*env, redlimit.Algorithm)
}

// onLog returns more with the sliding log added: most cases are written
// for it, the default algorithm.
func onLog(more needs) needs {
	more.Algorithms = append(more.Algorithms, redlimit.SlidingLog)
	return more
}

// need returns the needs of a case written for algs.
func need(algs ...redlimit.Algorithm) needs { return needs{Algorithms: algs} }

// cases is the suite, in the order Run runs it.
var cases = []testCase{
	// The API on the default algorithm (storetest.go).
	{name: "TrySetRate", needs: onLog(needs{}), fn: testTrySetRate},
	{name: "ConfigEpoch", needs: onLog(needs{ConfigEpochs: true}), fn: testConfigEpoch},
	{name: "SlidingWindow", needs: onLog(needs{ExactRetryAfter: true}), fn: testSlidingWindow},
	{name: "Seed002Scenario", needs: onLog(needs{}), fn: testSeed002},
	{name: "SetRateKeepsGrants", needs: onLog(needs{ExactRetryAfter: true}), fn: testSetRateKeepsGrants},
	{name: "SetRateReset", needs: onLog(needs{}), fn: testSetRateReset},
	{name: "SetRateResetEveryClient", needs: onLog(needs{ResetsEveryClient: true}), fn: testSetRateResetEveryClient},
	{name: "Modes", needs: onLog(needs{}), fn: testModes},
	{name: "Release", needs: onLog(needs{}), fn: testRelease},
	{name: "SelfHealingConfig", needs: onLog(needs{}), fn: testSelfHealing},
	{name: "DeleteExpire", needs: onLog(needs{}), fn: testDeleteExpire},
	{name: "BadInput", needs: onLog(needs{}), fn: testBadInput},
	{name: "WaitersFIFO", needs: onLog(needs{Reservations: true}), fn: testWaitersFIFO},
	{name: "CancelledWaiterHandsBack", needs: onLog(needs{}), fn: testCancelledWaiter},
	{name: "TryAcquireWait", needs: onLog(needs{ExactRetryAfter: true}), fn: testTryAcquireWait},
	{name: "ClockNeverRunsBackwards", needs: onLog(needs{}), fn: testClockBackwards},
	{name: "NamesStayApart", needs: onLog(needs{DistinctNames: true}), fn: testNamesApart},
	{name: "ConcurrentClients", needs: onLog(needs{MonotonicTime: true}), fn: testConcurrentClients},

	// Waiters giving up (cancel.go).
	{name: "CancelStorm", each: testCancelStorm},
	{name: "CancelStormLarge", needs: need(redlimit.TokenBucket), fn: testCancelStormLarge},
	{name: "MaxWaitBoundsQueue", needs: needs{Algorithms: []redlimit.Algorithm{redlimit.TokenBucket}, Reservations: true}, fn: testMaxWaitBoundsQueue},

	// Every algorithm (algorithm.go).
	{name: "EveryAlgorithm", needs: needs{ExactRetryAfter: true}, each: testEveryAlgorithm},
	{name: "WaitersInOrder", needs: needs{Reservations: true}, each: testWaitersInOrder},
	{name: "ForeignParameters", each: testForeignParameters},
	{name: "AlgorithmChange", needs: need(redlimit.SlidingLog, redlimit.TokenBucket), fn: testAlgorithmChange},

	// Time (time.go).
	{name: "SetRateAccountsThePastAtTheOldRate", needs: need(redlimit.TokenBucket), fn: testSetRateAccountsThePast},
	{name: "MicrosecondTokenBucket", needs: need(redlimit.TokenBucket), fn: testMicrosecondTokenBucket},
	{name: "MicrosecondLeakyBucket", needs: need(redlimit.LeakyBucket), fn: testMicrosecondLeakyBucket},
	{name: "MicrosecondFixedWindow", needs: need(redlimit.FixedWindow), fn: testMicrosecondFixedWindow},
	{name: "MicrosecondSlidingCounter", needs: need(redlimit.SlidingCounter), fn: testMicrosecondSlidingCounter},
	{name: "SlidingLogCountsMilliseconds", needs: onLog(needs{ExactRetryAfter: true}), fn: testSlidingLogMilliseconds},

	// The Limiter's contract with its callers (contract.go).
	{name: "AcquireRefusesPastDeadline", each: testAcquirePastDeadline},
	{name: "AcquireQueueFull", each: testAcquireQueueFull},
	{name: "ReleaseOnlyOwn", each: testReleaseOnlyOwn},
	{name: "ReleaseKeepsOthersGrants", needs: onLog(needs{}), fn: testReleaseKeepsOthersGrants},
	{name: "ConfigDrift", each: testConfigDrift},
	{name: "ConfigOverride", each: testConfigOverride},

	// Keyed, multi-limit policies (policy.go).
	{name: "PolicyKeyedAsLimiter", needs: needs{Policies: true, ExactRetryAfter: true}, each: testPolicyKeyed},
	{name: "PolicyAllOrNothing", needs: needs{Policies: true}, each: testPolicyAllOrNothing},
	{name: "PolicyRelease", needs: needs{Policies: true}, each: testPolicyRelease},
	{name: "PolicyCancelHandsBack", needs: needs{Policies: true, Reservations: true}, each: testPolicyCancel},
	{name: "PolicyResultPerLimit", needs: needs{Policies: true, ExactRetryAfter: true, Algorithms: []redlimit.Algorithm{redlimit.TokenBucket, redlimit.SlidingLog}}, fn: testPolicyResult},
	{name: "PolicyLatestRefuses", needs: onLog(needs{Policies: true, ExactRetryAfter: true}), fn: testPolicyLatestRefuses},
	{name: "PolicyWaitsForEveryLimit", needs: onLog(needs{Policies: true, ExactRetryAfter: true}), fn: testPolicyWaits},
	{name: "PolicyReservesOnEveryLimit", needs: needs{Policies: true, Reservations: true, ExactRetryAfter: true, Algorithms: []redlimit.Algorithm{redlimit.TokenBucket, redlimit.SlidingLog}}, fn: testPolicyReserveAll},
	{name: "PolicySetModes", needs: onLog(needs{Policies: true}), fn: testPolicySetModes},
	{name: "PolicyDelete", needs: onLog(needs{Policies: true}), fn: testPolicyDelete},
	{name: "PolicyStaleKnown", needs: onLog(needs{Policies: true}), fn: testPolicyStaleKnown},
	{name: "PolicyKeysApart", needs: onLog(needs{Policies: true}), fn: testPolicyKeysApart},
	{name: "PolicyBadInput", needs: onLog(needs{Policies: true}), fn: testPolicyBadInput},
}

// Run runs the suite against stores made by f: every case whose needs caps
// meets, each on a fresh store; the others are skipped, naming what they
// need. A case that holds for every algorithm is a subtest per algorithm
// of redlimit.Algorithms (Case/algorithm), skipped for those the store
// lacks, so that one algorithm's failure hides no other's.
func Run(t *testing.T, f Factory, caps Capabilities) {
	t.Helper()
	if err := caps.check(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if why := unmet(tc.needs, caps); why != "" {
				t.Skip(why)
			}
			if tc.each == nil {
				tc.fn(newEnv(t, f))
				return
			}
			for _, a := range redlimit.Algorithms {
				t.Run(string(a), func(t *testing.T) {
					if !caps.holds(a) {
						t.Skipf("needs algorithm %s, which the store lacks", a)
					}
					tc.each(newEnv(t, f), a)
				})
			}
		})
	}
}
