package batch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// heldRun is a run the test holds: Run blocks until the test answers it.
type heldRun struct {
	ctx   context.Context
	keys  []string
	calls map[string][]int
	// release answers the run: nil answers each call c with 10*c; an
	// error ends every work with it.
	release chan error
}

// harness is a Batcher whose Run hands every run to the test and checks
// on each that no log is in two works of one run nor in two runs at once.
type harness struct {
	t    *testing.T
	b    *Batcher[string, int, int]
	runs chan *heldRun

	mu       sync.Mutex
	inFlight map[string]bool
	backs    map[string][][2]int // calls handed back, with their results

	events chan string   // "queued a 3", "withdrawn a 3", "inline a 0"
	over   chan struct{} // a run is over
}

func newHarness(t *testing.T, cfg Config[string, int, int]) *harness {
	h := &harness{t: t, runs: make(chan *heldRun), inFlight: map[string]bool{}, backs: map[string][][2]int{}, events: make(chan string, 1024), over: make(chan struct{}, 1)}
	cfg.Run = h.run
	cfg.HandBack = func(key string, calls, results []int) {
		h.mu.Lock()
		defer h.mu.Unlock()
		for i := range calls {
			h.backs[key] = append(h.backs[key], [2]int{calls[i], results[i]})
		}
	}
	h.b = New(cfg)
	h.b.hook = func(ev event, key string, c int) {
		if ev == evRunOver {
			select {
			case h.over <- struct{}{}:
			default:
			}
			return
		}
		h.events <- fmt.Sprint([...]string{"inline", "queued", "withdrawn", "kept"}[ev], " ", key, " ", c)
	}
	return h
}

func (h *harness) run(ctx context.Context, works []*Work[string, int, int]) {
	r := &heldRun{ctx: ctx, calls: map[string][]int{}, release: make(chan error)}
	h.mu.Lock()
	for _, w := range works {
		if _, dup := r.calls[w.Key]; dup {
			h.t.Errorf("log %s twice in one run", w.Key)
		}
		if h.inFlight[w.Key] {
			h.t.Errorf("log %s in two runs at once", w.Key)
		}
		h.inFlight[w.Key] = true
		r.keys = append(r.keys, w.Key)
		r.calls[w.Key] = slices.Clone(w.Calls)
		if len(w.Results) != len(w.Calls) {
			h.t.Errorf("log %s: %d results for %d calls", w.Key, len(w.Results), len(w.Calls))
		}
	}
	h.mu.Unlock()
	h.runs <- r
	err := <-r.release
	h.mu.Lock()
	for _, w := range works {
		delete(h.inFlight, w.Key)
		if err != nil {
			w.Err = err
			continue
		}
		for i, c := range w.Calls {
			w.Results[i] = 10 * c
		}
	}
	h.mu.Unlock()
}

// next is the next run Run was given.
func (h *harness) next() *heldRun {
	h.t.Helper()
	select {
	case r := <-h.runs:
		return r
	case <-time.After(30 * time.Second): // a guard against a hang, never a condition
		h.t.Fatal("no run came")
		return nil
	}
}

// expect waits for the batcher's next event, which must be want.
func (h *harness) expect(want string) {
	h.t.Helper()
	select {
	case got := <-h.events:
		if got != want {
			h.t.Fatalf("event %q; want %q", got, want)
		}
	case <-time.After(30 * time.Second):
		h.t.Fatalf("never %q", want)
	}
}

type answer struct {
	r   int
	err error
}

// do makes a call in a goroutine of its own; its answer comes on the
// returned channel.
func (h *harness) do(ctx context.Context, key string, c int) <-chan answer {
	out := make(chan answer, 1)
	go func() {
		r, err := h.b.Do(ctx, key, c)
		out <- answer{r, err}
	}()
	return out
}

// queue makes a call that must queue, and waits until it has.
func (h *harness) queue(ctx context.Context, key string, c int) <-chan answer {
	out := h.do(ctx, key, c)
	h.expect(fmt.Sprint("queued ", key, " ", c))
	return out
}

// inline makes a call that must run at once, and returns its held run.
func (h *harness) inline(ctx context.Context, key string, c int) (<-chan answer, *heldRun) {
	out := h.do(ctx, key, c)
	h.expect(fmt.Sprint("inline ", key, " ", c))
	return out, h.next()
}

func (r *heldRun) want(t *testing.T, want string) {
	t.Helper()
	got := ""
	for _, k := range r.keys {
		got += fmt.Sprint(k, r.calls[k], " ")
	}
	if got != want+" " {
		t.Fatalf("run %q; want %q", got, want)
	}
}

func get(t *testing.T, ch <-chan answer, want int) {
	t.Helper()
	a := <-ch
	if a.err != nil || a.r != want {
		t.Fatalf("answer %d, %v; want %d", a.r, a.err, want)
	}
}

func canceled(t *testing.T, ch <-chan answer) {
	t.Helper()
	if a := <-ch; !errors.Is(a.err, context.Canceled) {
		t.Fatalf("answer %d, %v; want context.Canceled", a.r, a.err)
	}
}

// idle waits until the runs are over: then nothing may be left queued, in
// flight or waiting.
func (h *harness) idle() {
	h.t.Helper()
	for {
		h.b.mu.Lock()
		logs, ready, inflight := len(h.b.logs), len(h.b.ready), h.b.inflight
		h.b.mu.Unlock()
		if inflight == 0 {
			if logs != 0 || ready != 0 {
				h.t.Fatalf("no run in flight, yet %d logs, %d waiting", logs, ready)
			}
			return
		}
		select {
		case <-h.over:
		case <-time.After(30 * time.Second):
			h.t.Fatalf("runs never over: %d logs, %d waiting, %d runs in flight", logs, ready, inflight)
		}
	}
}

type ctxKey struct{}

// TestFIFOPerLog: a lone call runs at once on its caller's goroutine with
// its caller's context; calls made meanwhile queue and run in the order
// they were made, at most MaxCalls a run, one run of the log at a time.
func TestFIFOPerLog(t *testing.T) {
	h := newHarness(t, Config[string, int, int]{MaxCalls: 3})
	ctx := context.WithValue(context.Background(), ctxKey{}, "caller")
	first, r0 := h.inline(ctx, "a", 0)
	if r0.ctx.Value(ctxKey{}) != "caller" {
		t.Fatal("a lone call does not run under its caller's context")
	}
	var outs []<-chan answer
	for i := 1; i <= 7; i++ {
		outs = append(outs, h.queue(ctx, "a", i))
	}
	r0.release <- nil
	get(t, first, 0)
	for _, want := range []string{"a[1 2 3]", "a[4 5 6]", "a[7]"} {
		r := h.next()
		r.want(t, want)
		if r.ctx.Value(ctxKey{}) != nil {
			t.Fatal("a run in the background carries a caller's context")
		}
		r.release <- nil
	}
	for i, out := range outs {
		get(t, out, 10*(i+1))
	}
	h.idle()
}

// TestGroupingAcrossLogs: a run takes the waiting logs in the order they
// began to wait, up to MaxWorks, each once; a log whose run was in flight
// waits behind those that waited meanwhile.
func TestGroupingAcrossLogs(t *testing.T) {
	h := newHarness(t, Config[string, int, int]{MaxWorks: 3, MaxRuns: 1})
	ctx := context.Background()
	a0, r0 := h.inline(ctx, "a", 0)
	outs := map[string][]<-chan answer{}
	for _, k := range []string{"b", "c", "a", "d", "b", "e", "c"} {
		outs[k] = append(outs[k], h.queue(ctx, k, len(outs[k])+1))
	}
	r0.release <- nil
	get(t, a0, 0)
	r := h.next()
	r.want(t, "b[1 2] c[1 2] d[1]")
	r.release <- nil
	r = h.next()
	r.want(t, "e[1] a[1]")
	r.release <- nil
	for _, chs := range outs {
		for i, ch := range chs {
			get(t, ch, 10*(i+1))
		}
	}
	h.idle()
}

// TestRunsInFlight: at most MaxRuns runs are in flight; a lone call made
// while they are queues; Ungroup lifts the bound and runs each log alone.
func TestRunsInFlight(t *testing.T) {
	h := newHarness(t, Config[string, int, int]{MaxRuns: 2})
	ctx := context.Background()
	a, ra := h.inline(ctx, "a", 0)
	b, rb := h.inline(ctx, "b", 0)
	c := h.queue(ctx, "c", 0)
	d := h.queue(ctx, "d", 0)
	if !h.b.Grouping() {
		t.Fatal("not grouping before Ungroup")
	}
	h.b.Ungroup()
	if h.b.Grouping() {
		t.Fatal("still grouping after Ungroup")
	}
	// Two more runs go at once, with a and b still in flight.
	r1, r2 := h.next(), h.next()
	got := []string{r1.keys[0], r2.keys[0]}
	slices.Sort(got)
	if len(r1.keys) != 1 || len(r2.keys) != 1 || !slices.Equal(got, []string{"c", "d"}) {
		t.Fatalf("runs %v and %v; want c and d alone", r1.keys, r2.keys)
	}
	for _, r := range []*heldRun{ra, rb, r1, r2} {
		r.release <- nil
	}
	for _, ch := range []<-chan answer{a, b, c, d} {
		get(t, ch, 0)
	}
	h.idle()
}

// TestCancelQueued: a call whose context ends while it is queued is
// withdrawn: never run, never handed back, the others' order kept; the
// only call of a waiting log leaves nothing behind.
func TestCancelQueued(t *testing.T) {
	h := newHarness(t, Config[string, int, int]{MaxRuns: 1})
	ctx := context.Background()
	a0, r0 := h.inline(ctx, "a", 0)
	a1 := h.queue(ctx, "a", 1)
	cctx, cancel := context.WithCancel(ctx)
	a2 := h.queue(cctx, "a", 2)
	a3 := h.queue(ctx, "a", 3)
	bctx, bcancel := context.WithCancel(ctx)
	b1 := h.queue(bctx, "b", 1)
	cancel()
	h.expect("withdrawn a 2")
	canceled(t, a2)
	bcancel()
	h.expect("withdrawn b 1")
	canceled(t, b1)
	r0.release <- nil
	get(t, a0, 0)
	r := h.next()
	r.want(t, "a[1 3]")
	r.release <- nil
	get(t, a1, 10)
	get(t, a3, 30)
	h.idle()
	if n := h.b.Abandoned(); n != 0 || len(h.backs) != 0 {
		t.Fatalf("withdrawn calls: %d abandoned, handed back %v", n, h.backs)
	}
}

// TestCancelQueuedKept: a call that Keep keeps (a hand-back) is not
// withdrawn when its caller leaves while it is queued, even with its
// deadline passed: it runs in its turn, in a run whose context its
// passed deadline does not end, its result goes to HandBack, and Wait
// waits until then. Another call of the same queue is withdrawn.
func TestCancelQueuedKept(t *testing.T) {
	h := newHarness(t, Config[string, int, int]{MaxRuns: 1, Deadlines: true, Patience: time.Hour, Slack: time.Nanosecond,
		Keep: func(c int) bool { return c < 0 }})
	ctx := context.Background()
	a0, r0 := h.inline(ctx, "a", 0)
	expired, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	a1 := h.do(expired, "a", -1)
	h.expect("queued a -1")
	h.expect("kept a -1")
	if a := <-a1; !errors.Is(a.err, context.DeadlineExceeded) {
		t.Fatalf("answer %d, %v; want context.DeadlineExceeded", a.r, a.err)
	}
	a2 := h.queue(expired, "a", 2)
	h.expect("withdrawn a 2")
	canceled := <-a2
	if !errors.Is(canceled.err, context.DeadlineExceeded) {
		t.Fatalf("answer %d, %v; want context.DeadlineExceeded", canceled.r, canceled.err)
	}
	waited := make(chan error, 1)
	go func() { waited <- h.b.Wait(ctx) }()
	select {
	case err := <-waited:
		t.Fatalf("Wait returned (%v) with a kept call not yet run", err)
	default:
	}
	r0.release <- nil
	get(t, a0, 0)
	r := h.next()
	r.want(t, "a[-1]")
	if err := r.ctx.Err(); err != nil {
		t.Fatalf("the kept call's run was given a context already ended: %v", err)
	}
	r.release <- nil
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	h.idle()
	h.mu.Lock()
	backs := fmt.Sprint(h.backs)
	h.mu.Unlock()
	if n := h.b.Abandoned(); n != 0 || backs != "map[a:[[-1 -10]]]" {
		t.Fatalf("%d abandoned in flight, handed back %s; want none abandoned in flight, the kept call with its result", n, backs)
	}
}

// TestCancelInFlight: a call whose context ends while its run is in
// flight returns at once; when the run is over its result goes to
// HandBack (not when its work failed), and Wait waits until then.
func TestCancelInFlight(t *testing.T) {
	for _, fail := range []bool{false, true} {
		h := newHarness(t, Config[string, int, int]{})
		ctx := context.Background()
		a0, r0 := h.inline(ctx, "a", 0)
		cctx, cancel := context.WithCancel(ctx)
		a1 := h.queue(cctx, "a", 1)
		a2 := h.queue(ctx, "a", 2)
		r0.release <- nil
		get(t, a0, 0)
		r := h.next()
		r.want(t, "a[1 2]")
		cancel()
		canceled(t, a1) // while the run is held
		if n := h.b.Abandoned(); n != 1 {
			t.Fatalf("%d abandoned; want 1", n)
		}
		waited := make(chan error, 1)
		go func() { waited <- h.b.Wait(ctx) }()
		select {
		case err := <-waited:
			t.Fatalf("Wait returned (%v) with the run in flight", err)
		default:
		}
		var runErr error
		if fail {
			runErr = errors.New("run failed")
		}
		r.release <- runErr
		if err := <-waited; err != nil {
			t.Fatal(err)
		}
		a := <-a2
		h.mu.Lock()
		backs := fmt.Sprint(h.backs)
		h.mu.Unlock()
		if fail {
			if !errors.Is(a.err, runErr) || backs != "map[]" {
				t.Fatalf("failed run: the other caller got %v; handed back %s; want the run's error, nothing handed back", a.err, backs)
			}
		} else if a.err != nil || a.r != 20 || backs != "map[a:[[1 10]]]" {
			t.Fatalf("the other caller got %d, %v; handed back %s; want 20 and a's call 1 with its result 10", a.r, a.err, backs)
		}
		h.idle()
	}
}

// TestAnswerOrLeave: a caller that leaves just as its answer comes gets
// the answer, or leaves it to HandBack: exactly one of the two, never
// both, never neither, whichever way the race goes.
func TestAnswerOrLeave(t *testing.T) {
	h := newHarness(t, Config[string, int, int]{})
	ctx := context.Background()
	var got, back int
	for i := range 200 {
		a0, r0 := h.inline(ctx, "a", 0)
		cctx, cancel := context.WithCancel(ctx)
		a1 := h.queue(cctx, "a", 1)
		r0.release <- nil
		get(t, a0, 0)
		r := h.next()
		if i%2 == 0 {
			go cancel()
			r.release <- nil
		} else {
			go func() { r.release <- nil }()
			cancel()
		}
		a := <-a1
		if err := h.b.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		h.idle()
		h.mu.Lock()
		backs := len(h.backs["a"])
		h.mu.Unlock()
		switch {
		case a.err == nil && a.r == 10 && backs == back:
			got++
		case errors.Is(a.err, context.Canceled) && backs == back+1:
			back++
		default:
			t.Fatalf("round %d: the caller got %d, %v; %d handed back before, %d now", i, a.r, a.err, back, backs)
		}
	}
	t.Logf("answers taken by their callers %d, handed back %d", got, back)
	if h.b.Abandoned() != int64(back) {
		t.Fatalf("%d abandoned, %d handed back", h.b.Abandoned(), back)
	}
	h.idle()
}

// TestDeadlines: with Deadlines, a run in the background gets a context
// that ends Slack after its most patient caller's deadline, or Patience
// from now when a caller has none; runs share it while it fits them.
// Without Deadlines, runs get none.
func TestDeadlines(t *testing.T) {
	const slack, patient = time.Second, 5 * time.Second
	h := newHarness(t, Config[string, int, int]{Deadlines: true, Slack: slack, Patience: patient})
	ctx := context.Background()
	d0 := time.Now().Add(time.Hour)
	dctx := func(d time.Time) context.Context {
		c, cancel := context.WithDeadline(ctx, d)
		t.Cleanup(cancel)
		return c
	}
	a0, r0 := h.inline(dctx(d0), "a", 0)
	if dl, _ := r0.ctx.Deadline(); !dl.Equal(d0) {
		t.Fatalf("a lone call's run: deadline %v; want its caller's %v", dl, d0)
	}
	a1 := h.queue(dctx(d0.Add(-time.Minute)), "a", 1)
	a2 := h.queue(dctx(d0), "a", 2)
	r0.release <- nil
	get(t, a0, 0)
	r1 := h.next()
	if dl, _ := r1.ctx.Deadline(); !dl.Equal(d0.Add(slack)) {
		t.Fatalf("run deadline %v; want the most patient caller's plus slack, %v", dl, d0.Add(slack))
	}
	a3 := h.queue(dctx(d0.Add(slack/2)), "a", 3)
	r1.release <- nil
	r2 := h.next()
	if r2.ctx != r1.ctx {
		t.Fatal("a run within the slack got a context of its own")
	}
	before := time.Now()
	a4 := h.queue(ctx, "a", 4) // no deadline
	r2.release <- nil
	r3 := h.next()
	if dl, ok := r3.ctx.Deadline(); !ok || dl.Before(d0.Add(slack)) && dl.Before(before.Add(patient+slack)) {
		t.Fatalf("a caller without deadline: run deadline %v, %v; want at least %v", dl, ok, before.Add(patient+slack))
	}
	r3.release <- nil
	for i, ch := range []<-chan answer{a1, a2, a3, a4} {
		get(t, ch, 10*(i+1))
	}
	h.idle()

	// The rule itself, on deadlines a run cannot reach.
	b := New(Config[string, int, int]{Run: h.run, Deadlines: true, Slack: slack, Patience: patient})
	at := func(d time.Time) *patience { return &patience{latest: d} }
	ctx1, dl1 := b.contextFor(at(d0))
	if got, _ := ctx1.Deadline(); !got.Equal(d0.Add(slack)) || !dl1.Equal(got) {
		t.Fatalf("first deadline %v (%v), want %v", got, dl1, d0.Add(slack))
	}
	if ctx, _ := b.contextFor(at(d0.Add(slack / 2))); ctx != ctx1 {
		t.Error("a caller within the slack got a context of its own")
	}
	if ctx, dl := b.contextFor(at(d0.Add(2 * slack))); ctx == ctx1 || !dl.Equal(d0.Add(3*slack)) {
		t.Errorf("a more patient caller shares a context ending at %v; want its own, ending at %v", dl, d0.Add(3*slack))
	}
	if _, dl := b.contextFor(at(d0)); !dl.Equal(d0.Add(slack)) {
		t.Errorf("a caller far less patient than the shared context gets %v; want %v", dl, d0.Add(slack))
	}
	if ctx, _ := b.contextFor(&patience{forever: true}); ctx.Done() == nil {
		t.Error("a caller without deadline: a run without one")
	}
	b.deadlines = false
	if ctx, dl := b.contextFor(at(d0)); ctx.Done() != nil || !dl.IsZero() {
		t.Errorf("without Deadlines: context with deadline %v", dl)
	}
}

// TestStorm: many callers on a few logs, some leaving at random moments,
// with runs answered at once: on every log the runs carry the calls in
// the order they were made, less those withdrawn; every call is answered
// to its caller, withdrawn, or handed back, exactly once; no run carries a
// log twice or overlaps another of the same log (the harness checks); and
// nothing is left running (goleak).
func TestStorm(t *testing.T) {
	var mu sync.Mutex
	admitted := map[string][]int{}
	withdrawn := map[int]bool{}
	ran := map[string][]int{}
	handed := map[int]bool{}
	b := New(Config[string, int, int]{
		MaxCalls: 4, MaxWorks: 3, MaxRuns: 2,
		Run: func(ctx context.Context, works []*Work[string, int, int]) {
			mu.Lock()
			for _, w := range works {
				ran[w.Key] = append(ran[w.Key], w.Calls...)
			}
			mu.Unlock()
			runtime.Gosched()
			for _, w := range works {
				if w.Calls[0]%7 == 0 {
					w.Err = errors.New("failed")
					continue
				}
				for i, c := range w.Calls {
					w.Results[i] = -c
				}
			}
		},
		HandBack: func(key string, calls, results []int) {
			mu.Lock()
			defer mu.Unlock()
			for i, c := range calls {
				if handed[c] || results[i] != -c {
					t.Errorf("call %d handed back twice, or with result %d", c, results[i])
				}
				handed[c] = true
			}
		},
	})
	b.hook = func(ev event, key string, c int) {
		mu.Lock()
		defer mu.Unlock()
		switch ev {
		case evWithdrawn:
			withdrawn[c] = true
		case evInline, evQueued:
			admitted[key] = append(admitted[key], c)
		}
	}
	var next atomic.Int64
	var answered, cancelled, failed atomic.Int64
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 300 {
				key := fmt.Sprint("log", rng.IntN(5))
				c := int(next.Add(1))
				ctx, cancel := context.WithCancel(context.Background())
				if rng.IntN(4) == 0 {
					go cancel()
				}
				r, err := b.Do(ctx, key, c)
				cancel()
				switch {
				case err == nil && r == -c:
					answered.Add(1)
				case errors.Is(err, context.Canceled):
					cancelled.Add(1)
				case err != nil && err.Error() == "failed":
					failed.Add(1)
				default:
					t.Errorf("call %d: %d, %v", c, r, err)
				}
			}
		}()
	}
	wg.Wait()
	if err := b.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The last runs answer their callers before they are over, and their
	// goroutines call the hook (taking mu) with b.mu held: wait for them
	// before taking mu, which would otherwise deadlock with them.
	for b.InFlight() != 0 {
		time.Sleep(time.Millisecond) // polled: the run is ending
	}
	mu.Lock()
	defer mu.Unlock()
	for key, calls := range admitted {
		want := slices.DeleteFunc(slices.Clone(calls), func(c int) bool { return withdrawn[c] })
		if !slices.Equal(ran[key], want) {
			t.Fatalf("log %s: ran %v; want the calls in the order they were made, less the withdrawn: %v", key, ran[key], want)
		}
	}
	// A cancelled caller's call was withdrawn, or in flight: then handed
	// back, unless its work failed (counted abandoned either way).
	if got := int64(len(withdrawn)) + b.Abandoned(); got != cancelled.Load() {
		t.Fatalf("%d cancelled callers; %d withdrawn + %d abandoned", cancelled.Load(), len(withdrawn), b.Abandoned())
	}
	if int64(len(handed)) > b.Abandoned() {
		t.Fatalf("%d handed back of %d abandoned", len(handed), b.Abandoned())
	}
	t.Logf("%d answered, %d failed, %d cancelled (%d withdrawn, %d abandoned in flight, %d handed back)",
		answered.Load(), failed.Load(), cancelled.Load(), len(withdrawn), b.Abandoned(), len(handed))
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.logs) != 0 || len(b.ready) != 0 || b.inflight != 0 {
		t.Fatalf("not idle: %d logs, %d waiting, %d in flight", len(b.logs), len(b.ready), b.inflight)
	}
}
