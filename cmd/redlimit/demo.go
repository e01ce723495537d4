package main

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/redlimit/redlimit"
)

// demoCmd is "redlimit demo".
var demoCmd = &command{
	name:     "demo",
	summary:  "callers wait in Acquire on one limiter; prints each grant as it happens",
	synopsis: "[--callers 20] [--rate 1] [--interval 1s] [--permits 1] [--name demo]",
	run:      cmdDemo,
	help: `
Starts the callers at once; each waits in Acquire for its permits from one
overall limiter of rate per interval, reset first so that every run starts
afresh. Prints each grant as it happens, the callers numbered in the order
they are granted from caller 1 (its time since the start and how long the
caller waited), then how long serving everyone took: with the defaults
about 19s, one caller a second.`,
}

// maxCallers bounds --callers: each caller is a goroutine and a line.
const maxCallers = 100000

// grant is one caller's grant in the demo.
type grant struct {
	caller int
	at     time.Duration // since the start
	waited time.Duration
}

// cmdDemo is "redlimit demo": callers wait in Acquire on one overall limiter.
func cmdDemo(ctx context.Context, c *cli, cmd *command, args []string) int {
	var sf storeFlags
	fs := c.flagSet(cmd, &sf)
	callers := fs.Int("callers", 20, "`number` of concurrent callers")
	rate := fs.Int64("rate", 1, "permits per interval")
	interval := fs.Duration("interval", time.Second, "the `interval` of the rate")
	permits := fs.Int64("permits", 1, "`number` of permits each caller acquires")
	name := fs.String("name", "demo", "`name` of the limiter (reset at the start)")
	if _, code, ok := c.parse(fs, cmd, args); !ok {
		return code
	}
	if *callers < 1 || *callers > maxCallers {
		return c.errorf(cmd, "invalid --callers %d: must be 1..%d", *callers, maxCallers)
	}
	cfg, err := redlimit.PerInterval(*rate, *interval).Normalize()
	if err != nil {
		return c.fail(cmd, err)
	}
	if *permits < 1 || *permits > cfg.Rate {
		return c.errorf(cmd, "invalid --permits %d: must be 1..%d (the rate)", *permits, cfg.Rate)
	}
	store, closeStore, err := c.openStore(&sf)
	if err != nil {
		return c.fail(cmd, err)
	}
	defer closeStore()
	clk := c.clock()
	l, err := redlimit.New(store, *name, redlimit.WithClock(clk), redlimit.WithConfig(cfg))
	if err != nil {
		return c.fail(cmd, err)
	}
	// The set-up is bounded by --timeout; the callers' waits are not, only
	// each of their calls (the client's read and write timeouts).
	setup, cancelSetup := sf.bound(ctx, 0)
	defer cancelSetup()
	if err := l.SetRate(setup, cfg, redlimit.ResetState()); err != nil {
		return c.fail(cmd, err)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	width := max(2, len(fmt.Sprint(*callers)))
	var (
		mu       sync.Mutex // guards grants, firstErr and stdout
		grants   []grant
		firstErr error
		wg       sync.WaitGroup
	)
	// Grants are timed on the store's clock, from its time now (in whole
	// ms, as the stores count), so that clocks that disagree do not matter.
	now, err := c.storeNow(setup, store)
	if err != nil {
		return c.fail(cmd, err)
	}
	start := now.Truncate(time.Millisecond)
	for range *callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := l.Acquire(ctx, *permits)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
					cancel() // the others hand their reservations back and stop
				}
				return
			}
			// Callers are numbered as they are granted, from 1: the
			// goroutines' start order means nothing to the store. The
			// grant's instant is the one the store reserved, not when this
			// goroutine got to run after its timer fired.
			g := grant{caller: len(grants) + 1, at: max(0, res.At.Sub(start)), waited: res.Waited}
			grants = append(grants, g)
			if sf.json {
				return
			}
			what := ""
			if *permits != 1 {
				what = fmt.Sprintf(" %d permits", *permits)
			}
			fmt.Fprintf(c.stdout, "caller %0*d granted%s at +%s (waited %s)\n", width, g.caller, what, seconds(g.at, 3), seconds(g.waited, 3))
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return c.fail(cmd, firstErr)
	}

	// Lines came out as the callers woke, in the order of the grants but
	// for a caller that woke late; the summary and the JSON are in the
	// order of the grants' instants (ties: as they came), numbered so.
	sort.SliceStable(grants, func(i, j int) bool { return grants[i].at < grants[j].at })
	for i := range grants {
		grants[i].caller = i + 1
	}
	elapsed := grants[len(grants)-1].at
	if sf.json {
		type grantJSON struct {
			Caller   int   `json:"caller"`
			AtMS     int64 `json:"at_ms"`
			WaitedMS int64 `json:"waited_ms"`
		}
		out := struct {
			Name      string      `json:"name"`
			Callers   int         `json:"callers"`
			Permits   int64       `json:"permits"`
			Config    configJSON  `json:"config"`
			Grants    []grantJSON `json:"grants"`
			ElapsedMS int64       `json:"elapsed_ms"`
		}{Name: *name, Callers: *callers, Permits: *permits, Config: toJSON(cfg), ElapsedMS: elapsed.Milliseconds()}
		for _, g := range grants {
			out.Grants = append(out.Grants, grantJSON{Caller: g.caller, AtMS: g.at.Milliseconds(), WaitedMS: g.waited.Milliseconds()})
		}
		return c.printJSON(cmd, out)
	}
	who := plural(int64(*callers), "caller")
	if *permits != 1 {
		who += fmt.Sprintf(" of %d permits", *permits)
	}
	fmt.Fprintf(c.stdout, "%s, %d per %s: all granted in %s\n", who, cfg.Rate, cfg.Interval, seconds(elapsed, 1))
	return exitOK
}

// seconds prints d in seconds with the given number of decimals: "3.000s".
func seconds(d time.Duration, decimals int) string {
	return fmt.Sprintf("%.*fs", decimals, d.Seconds())
}
