package rls

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"
)

// Options tunes Decisions. The zero value compares 5 windows of Rules'
// "cmp" descriptor.
type Options struct {
	// Domain and Key name the descriptor (one entry, its value chosen per
	// system); default Domain and CompareKey. Its rule must be a fixed
	// window of a second or a minute.
	Domain, Key string
	// Windows is how many windows are compared; default 5.
	Windows int
	// Burst is how many calls each system gets in a window; default the
	// limit + 5. It must exceed the limit, so that refusals are compared
	// too.
	Burst int
	// Guard keeps every call this far from the window's edges: a burst
	// starts Guard after a window begins, and a window whose burst ends
	// later than Guard before it closes is not compared (and another is
	// tried, up to 3 x Windows in all); default 50ms.
	Guard time.Duration
	// RunID makes this run's descriptor values its own (counts left in
	// Redis by an earlier run are not seen); default random.
	RunID string
}

// Answer is one call's answer, as compared.
type Answer struct {
	// Code is the descriptor's code, "OK" or "OVER_LIMIT", or
	// "error: " and the gRPC status code.
	Code string `json:"code"`
	// Remaining is limit_remaining.
	Remaining uint32 `json:"remaining"`
	// Limit and Unit are current_limit's (0 and "" without one).
	Limit uint32 `json:"limit"`
	Unit  string `json:"unit"`
	// ResetSeconds is duration_until_reset rounded up to a whole second
	// (envoyproxy/ratelimit answers whole seconds).
	ResetSeconds int64 `json:"reset_seconds"`
}

func (a Answer) String() string {
	return fmt.Sprintf("%s remaining=%d limit=%d/%s reset=%ds", a.Code, a.Remaining, a.Limit, a.Unit, a.ResetSeconds)
}

// Mismatch is a call answered differently by the two systems.
type Mismatch struct {
	Window int    `json:"window"`
	Call   int    `json:"call"`
	A      Answer `json:"a"`
	B      Answer `json:"b"`
}

// Window is one burst: Burst calls to each system, interleaved (A, B, A,
// B, ...), inside one window.
type Window struct {
	Start time.Time `json:"start"`
	// A and B are the systems' answers, in order.
	A []Answer `json:"a"`
	B []Answer `json:"b"`
	// Took is from the first call sent to the last answer.
	Took time.Duration `json:"took_ns"`
	// Skipped says why the window was not compared ("" when it was).
	Skipped string `json:"skipped,omitempty"`
}

// DecisionReport is the outcome of Decisions.
type DecisionReport struct {
	Systems [2]System `json:"systems"`
	Domain  string    `json:"domain"`
	Key     string    `json:"key"`
	// Limit and Unit are the rule's, from system A's first answer.
	Limit uint32 `json:"limit"`
	Unit  string `json:"unit"`
	Burst int    `json:"burst"`
	RunID string `json:"run_id"`
	// Windows holds every window tried, compared or not.
	Windows    []Window   `json:"windows"`
	Compared   int        `json:"compared"`
	Mismatches []Mismatch `json:"mismatches"`
	// Equal: every call of every compared window was answered alike, and
	// at least one window was compared.
	Equal bool `json:"equal"`
	// FixedWindow says, per system, whether each compared window went as
	// a fixed window of Limit goes: Limit calls OK with limit_remaining
	// Limit-1 down to 0, then OVER_LIMIT with 0.
	FixedWindow [2]bool `json:"fixed_window"`
}

// Decisions compares a's and b's answers to the same traffic: after one
// probe call each (which learns the rule's limit and window), each
// compared window is a burst of Burst calls to each system, on one
// descriptor value per system that stays the same from window to window
// (so each window's reset is seen). The report says whether they agreed;
// an error means the comparison could not be made (a system unreachable,
// no limit on the descriptor, ctx ended).
func Decisions(ctx context.Context, a, b System, o Options) (*DecisionReport, error) {
	if err := checkSystems(a, b); err != nil {
		return nil, err
	}
	if o.Domain == "" {
		o.Domain = Domain
	}
	if o.Key == "" {
		o.Key = CompareKey
	}
	if o.Windows <= 0 {
		o.Windows = 5
	}
	if o.Guard <= 0 {
		o.Guard = 50 * time.Millisecond
	}
	if o.RunID == "" {
		o.RunID = newRunID()
	}
	ccA, ca, err := dial(a)
	if err != nil {
		return nil, err
	}
	defer ccA.Close()
	ccB, cb, err := dial(b)
	if err != nil {
		return nil, err
	}
	defer ccB.Close()

	r := &DecisionReport{Systems: [2]System{a, b}, Domain: o.Domain, Key: o.Key, RunID: o.RunID}
	var unit time.Duration
	for i, c := range []rlsv3.RateLimitServiceClient{ca, cb} {
		ans, err := callOnce(ctx, c, request(o.Domain, o.Key, o.RunID+"-probe-"+r.Systems[i].Name))
		if err != nil {
			return nil, fmt.Errorf("rls: probe of %s: %w", r.Systems[i].Name, err)
		}
		if ans.Limit == 0 {
			return nil, fmt.Errorf("rls: %s has no limit on domain %q key %q: %v", r.Systems[i].Name, o.Domain, o.Key, ans)
		}
		if i == 0 {
			r.Limit, r.Unit = ans.Limit, ans.Unit
		}
	}
	switch r.Unit {
	case "SECOND":
		unit = time.Second
	case "MINUTE":
		unit = time.Minute
	default:
		return nil, fmt.Errorf("rls: the rule's window is a %s: want a SECOND or a MINUTE", r.Unit)
	}
	if o.Guard*4 > unit {
		return nil, fmt.Errorf("rls: guard %v is too long for a window of %v", o.Guard, unit)
	}
	if o.Burst == 0 {
		o.Burst = int(r.Limit) + 5
	}
	if o.Burst <= int(r.Limit) || o.Burst > 10000 {
		return nil, fmt.Errorf("rls: burst %d: want more than the limit (%d) and at most 10000", o.Burst, r.Limit)
	}
	r.Burst = o.Burst

	reqA := request(o.Domain, o.Key, o.RunID+"-"+a.Name)
	reqB := request(o.Domain, o.Key, o.RunID+"-"+b.Name)
	for try := 0; r.Compared < o.Windows && try < 3*o.Windows; try++ {
		start := time.Now().Truncate(unit).Add(unit)
		if err := sleepUntil(ctx, start.Add(o.Guard)); err != nil {
			return nil, err
		}
		w := Window{Start: start}
		began := time.Now()
		for range o.Burst {
			w.A = append(w.A, callAnswer(ctx, ca, reqA))
			w.B = append(w.B, callAnswer(ctx, cb, reqB))
		}
		end := time.Now()
		w.Took = end.Sub(began)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if end.After(start.Add(unit - o.Guard)) {
			w.Skipped = fmt.Sprintf("the burst took %v, past %v before the window's end", w.Took.Round(time.Millisecond), o.Guard)
		} else {
			r.Mismatches = append(r.Mismatches, compareWindow(len(r.Windows), w.A, w.B)...)
			r.Compared++
		}
		r.Windows = append(r.Windows, w)
	}
	r.Equal = r.Compared > 0 && len(r.Mismatches) == 0
	r.FixedWindow = [2]bool{r.Compared > 0, r.Compared > 0}
	for _, w := range r.Windows {
		if w.Skipped == "" {
			r.FixedWindow[0] = r.FixedWindow[0] && asFixedWindow(w.A, r.Limit)
			r.FixedWindow[1] = r.FixedWindow[1] && asFixedWindow(w.B, r.Limit)
		}
	}
	return r, nil
}

// compareWindow lists the calls of window w that a and b answered
// differently (a missing answer is a zero Answer).
func compareWindow(w int, a, b []Answer) []Mismatch {
	var out []Mismatch
	for i := range max(len(a), len(b)) {
		var x, y Answer
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			out = append(out, Mismatch{Window: w, Call: i, A: x, B: y})
		}
	}
	return out
}

// asFixedWindow says whether answers are those of a fresh fixed window of
// limit: limit times OK (remaining limit-1 ... 0), then OVER_LIMIT with 0.
func asFixedWindow(answers []Answer, limit uint32) bool {
	for i, a := range answers {
		want := Answer{Code: "OVER_LIMIT", Remaining: 0}
		if uint32(i) < limit {
			want = Answer{Code: "OK", Remaining: limit - 1 - uint32(i)}
		}
		if a.Code != want.Code || a.Remaining != want.Remaining || a.Limit != limit {
			return false
		}
	}
	return true
}

// callOnce makes one call and returns the answer for its descriptor.
func callOnce(ctx context.Context, c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest) (Answer, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(cctx, req)
	if err != nil {
		return Answer{}, err
	}
	return answerOf(resp)
}

// callAnswer is callOnce with a failure as an Answer, so that it is
// compared like the rest.
func callAnswer(ctx context.Context, c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest) Answer {
	a, err := callOnce(ctx, c, req)
	if err != nil {
		return Answer{Code: "error: " + status.Code(err).String()}
	}
	return a
}

func answerOf(resp *rlsv3.RateLimitResponse) (Answer, error) {
	if len(resp.GetStatuses()) != 1 {
		return Answer{}, fmt.Errorf("rls: %d statuses for one descriptor", len(resp.GetStatuses()))
	}
	st := resp.Statuses[0]
	a := Answer{Code: st.GetCode().String(), Remaining: st.GetLimitRemaining()}
	if l := st.GetCurrentLimit(); l != nil {
		a.Limit, a.Unit = l.GetRequestsPerUnit(), l.GetUnit().String()
	}
	if d := st.GetDurationUntilReset(); d != nil {
		dur := d.AsDuration()
		a.ResetSeconds = int64((dur + time.Second - 1) / time.Second)
	}
	return a, nil
}

func sleepUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

func newRunID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
