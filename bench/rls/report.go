package rls

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// WriteMarkdown writes the decisions' outcome: the verdict, each system's
// answers in a compared window, and every mismatch (at most 20 shown).
func (r *DecisionReport) WriteMarkdown(w io.Writer) {
	a, b := r.Systems[0].Name, r.Systems[1].Name
	verdict := "**equal**"
	if !r.Equal {
		verdict = fmt.Sprintf("**not equal**: %d calls answered differently", len(r.Mismatches))
		if r.Compared == 0 {
			verdict = "**not compared**: no window could be compared"
		}
	}
	fmt.Fprintf(w, "Decisions: domain `%s`, descriptor `%s`, a fixed window of %d per %s; %d calls to each system per window, interleaved; %d windows compared (%d tried): %s.\n\n",
		r.Domain, r.Key, r.Limit, strings.ToLower(r.Unit), r.Burst, r.Compared, len(r.Windows), verdict)
	fmt.Fprintf(w, "| window | %s | %s | as a fixed window of %d | took |\n|---|---|---|---|---|\n", a, b, r.Limit)
	for i, win := range r.Windows {
		if win.Skipped != "" {
			fmt.Fprintf(w, "| %d | | | not compared: %s | |\n", i+1, win.Skipped)
			continue
		}
		fmt.Fprintf(w, "| %d | %s | %s | %s | %v |\n", i+1, runs(win.A), runs(win.B),
			yesNo(asFixedWindow(win.A, r.Limit), asFixedWindow(win.B, r.Limit), a, b), win.Took.Round(100*time.Microsecond))
	}
	if len(r.Mismatches) > 0 {
		fmt.Fprintf(w, "\n| window | call | %s | %s |\n|---|---|---|---|\n", a, b)
		for i, m := range r.Mismatches {
			if i == 20 {
				fmt.Fprintf(w, "| ... | %d more | | |\n", len(r.Mismatches)-20)
				break
			}
			fmt.Fprintf(w, "| %d | %d | %v | %v |\n", m.Window+1, m.Call+1, m.A, m.B)
		}
	}
	fmt.Fprintln(w)
}

func yesNo(x, y bool, a, b string) string {
	switch {
	case x && y:
		return "both"
	case x:
		return a + " only"
	case y:
		return b + " only"
	}
	return "neither"
}

// runs writes answers as runs of equal codes: "20 OK (remaining 19..0,
// reset 1s), 5 OVER_LIMIT (remaining 0, reset 1s)".
func runs(answers []Answer) string {
	var parts []string
	for i := 0; i < len(answers); {
		j := i
		for j < len(answers) && answers[j].Code == answers[i].Code {
			j++
		}
		first, last := answers[i], answers[j-1]
		rem := fmt.Sprint(first.Remaining)
		if first.Remaining != last.Remaining {
			rem = fmt.Sprintf("%d..%d", first.Remaining, last.Remaining)
		}
		reset := fmt.Sprintf("%ds", first.ResetSeconds)
		if first.ResetSeconds != last.ResetSeconds {
			reset = fmt.Sprintf("%d..%ds", first.ResetSeconds, last.ResetSeconds)
		}
		parts = append(parts, fmt.Sprintf("%d %s (remaining %s, reset %s)", j-i, answers[i].Code, rem, reset))
		i = j
	}
	return strings.Join(parts, ", ")
}

// WriteMarkdown writes one row per number of callers: each system's
// decisions/s and p99 as median [min-max] over the rounds, and A/B taken
// within each round.
func (r *LoadReport) WriteMarkdown(w io.Writer) {
	a, b := r.Systems[0].Name, r.Systems[1].Name
	values := "each caller on its own value"
	if r.OneValue {
		values = "every caller on one value (one count)"
	}
	fmt.Fprintf(w, "Load: domain `%s`, descriptor `%s` (every call granted), %s, closed loop; %d rounds of %v (after %v unmeasured), the systems in turn (%s %s, %s %s, ...); %d client connection(s) per measurement. Median [min-max] over the rounds; ratios %s/%s taken within each round.\n\n",
		r.Domain, r.Key, values, r.Rounds, r.Duration, r.Warmup, a, b, b, a, r.Conns, a, b)
	fmt.Fprintf(w, "| callers | %s decisions/s | %s decisions/s | decisions/s %s/%s (per round) | %s p99 | %s p99 | p99 %s/%s (per round) | %s p50 | %s p50 |\n",
		a, b, a, b, a, b, a, b, a, b)
	fmt.Fprintln(w, "|---:|---:|---:|---|---:|---:|---|---:|---:|")
	for _, c := range r.Cells {
		fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.Callers,
			num(c.PerSecond[0]), num(c.PerSecond[1]), ratios(c.Ratio, c.Ratios),
			dur(c.P99[0]), dur(c.P99[1]), ratios(c.P99Ratio, c.P99Ratios),
			dur(c.P50[0]), dur(c.P50[1]))
	}
	if r.hasUse() {
		fmt.Fprintf(w, "\nPer decision, median [min-max] over the rounds: CPU of each service's process, of Redis, and of the load generator (this process: client and callers); Redis commands.\n\n")
		fmt.Fprintf(w, "| callers | %s CPU | %s CPU | Redis CPU (%s) | Redis CPU (%s) | client CPU (%s) | client CPU (%s) | Redis commands (%s) | Redis commands (%s) |\n", a, b, a, b, a, b, a, b)
		fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, c := range r.Cells {
			fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.Callers,
				micros(c.ServerCPU[0]), micros(c.ServerCPU[1]), micros(c.RedisCPU[0]), micros(c.RedisCPU[1]),
				micros(c.ClientCPU[0]), micros(c.ClientCPU[1]), count(c.RedisCmds[0]), count(c.RedisCmds[1]))
		}
	}
	if r.Floor != nil {
		fmt.Fprintf(w, "\nBaseline, not a rate limiter, never in a ratio: `%s`, a plain gRPC-go server with redlimit serve's gRPC options answering every call one constant OK, without Redis; measured the same way, after the two systems in each round. Its CPU per call is what gRPC-go alone costs a service.\n\n", r.Floor.Name)
		fmt.Fprintf(w, "| callers | %s decisions/s | %s p99 | %s p50 | %s CPU | Redis CPU (%s) | client CPU (%s) |\n", r.Floor.Name, r.Floor.Name, r.Floor.Name, r.Floor.Name, r.Floor.Name, r.Floor.Name)
		fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|")
		for _, c := range r.Cells {
			if f := c.Floor; f != nil {
				fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %s |\n", c.Callers, num(f.PerSecond), dur(f.P99), dur(f.P50),
					micros(f.ServerCPU), micros(f.RedisCPU), micros(f.ClientCPU))
			}
		}
	}
	var notes []string
	for _, c := range r.Cells {
		if c.Errors > 0 || c.Refused > 0 {
			notes = append(notes, fmt.Sprintf("%d callers: %d failed calls, %d refused", c.Callers, c.Errors, c.Refused))
		}
		if c.Floor != nil && c.Floor.Errors > 0 {
			notes = append(notes, fmt.Sprintf("%d callers: %d failed calls to the floor", c.Callers, c.Floor.Errors))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "\nNote: %s.\n", strings.Join(notes, "; "))
	}
	fmt.Fprintln(w)
}

func num(s Stat) string {
	if s.N == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f [%.0f-%.0f]", s.Median, s.Min, s.Max)
}

func dur(s Stat) string {
	if s.N == 0 {
		return "-"
	}
	f := func(x float64) string { return time.Duration(x).Round(time.Microsecond).String() }
	return fmt.Sprintf("%s [%s-%s]", f(s.Median), f(s.Min), f(s.Max))
}

func ratios(s Stat, each []float64) string {
	if s.N == 0 {
		return "-"
	}
	per := make([]string, len(each))
	for i, x := range each {
		per[i] = fmt.Sprintf("%.2f", x)
	}
	return fmt.Sprintf("%.2f [%.2f-%.2f] (%s)", s.Median, s.Min, s.Max, strings.Join(per, ", "))
}

// hasUse says whether any cell has a server's or Redis's CPU figures.
func (r *LoadReport) hasUse() bool {
	for _, c := range r.Cells {
		for i := range 2 {
			if c.ServerCPU[i].N > 0 || c.RedisCPU[i].N > 0 {
				return true
			}
		}
	}
	return false
}

// micros writes CPU seconds as microseconds.
func micros(s Stat) string {
	if s.N == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f µs [%.1f-%.1f]", s.Median*1e6, s.Min*1e6, s.Max*1e6)
}

func count(s Stat) string {
	if s.N == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f [%.2f-%.2f]", s.Median, s.Min, s.Max)
}
