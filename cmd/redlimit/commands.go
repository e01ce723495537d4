package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/algorithm"
)

// command is a subcommand: one row of the command table, defined in the
// command's own file beside its run function.
type command struct {
	name     string
	summary  string // one line, for the list of commands in 'redlimit help'
	synopsis string // its arguments, after "redlimit NAME"
	help     string // what it does, for its -h
	wantName bool   // takes the NAME positional
	noStore  bool   // uses no store: no --redis, --prefix
	// passFlags: its flags go to another program (bench), whose -h is
	// not this command's help.
	passFlags bool
	run       func(ctx context.Context, c *cli, cmd *command, args []string) int
}

// commands is the command table, in the order of the usage text: dispatch,
// 'redlimit help' and the package documentation (doc.go, generated from the
// usage by TestDoc) all read it. It is filled in init because the help
// command reads it.
var commands []*command

func init() {
	commands = []*command{
		demoCmd,
		setRateCmd,
		acquireCmd,
		getCmd,
		deleteCmd,
		migrateCmd,
		simulateCmd,
		benchCmd,
		serveCmd,
		helpCmd,
		versionCmd,
	}
}

// lookup returns the command called name, or nil.
func lookup(name string) *command {
	for _, cmd := range commands {
		if cmd.name == name {
			return cmd
		}
	}
	return nil
}

// algorithmsHelp lists the algorithms for the help of the commands that set
// a config: each one's summary from the registry (package algorithm).
var algorithmsHelp = func() string {
	var b strings.Builder
	b.WriteString("\n\nAlgorithms (--algorithm, default " + string(redlimit.SlidingLog) + "):")
	for _, s := range algorithm.All() {
		lines := wrap(s.Summary, 80-19)
		fmt.Fprintf(&b, "\n  %-15s  %s", s.Name, strings.Join(lines, "\n"+strings.Repeat(" ", 19)))
	}
	return b.String()
}()

// algorithmsLine is the usage's line of algorithms, with the parameters
// each takes, wrapped.
func algorithmsLine() string {
	var items []string
	for i, s := range algorithm.All() {
		item := s.Name
		if i == 0 {
			item += " (the default)"
		}
		if s.Params != 0 {
			item += " (--" + strings.ReplaceAll(s.Params.String(), "+", ", --") + ")"
		}
		items = append(items, item)
	}
	return strings.Join(wrap("Algorithms (--algorithm): "+strings.Join(items, ", ")+".", 79), "\n")
}

// wrap breaks text into lines of at most width runes, between words.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		switch {
		case line == "":
			line = w
		case len([]rune(line))+1+len([]rune(w)) <= width:
			line += " " + w
		default:
			lines = append(lines, line)
			line = w
		}
	}
	return append(lines, line)
}

const usageHead = `redlimit: distributed rate limiters (in the style of Redisson's RRateLimiter)

Usage:
`

const usageTail = `
  --redis URL   the Redis to use (default $REDIS_URL): redis://host:6379/0,
                rediss://... (TLS), redis+sentinel://s1:26379?master_name=M&addr=s2:26379,
                redis+cluster://n1:6379?addr=n2:6379;
                empty: an in-memory store that lives only as long as the command
  --prefix P    the Redis key prefix (default "redlimit:")
  --timeout D   the most connecting to Redis or one call to it may take
                (default 5s); set-rate, acquire (plus --wait), get and delete
                take at most that in all
The commands that print a result take:
  --json        print one JSON object on stdout instead of text (errors stay
                text on stderr)

%s
Durations are Go durations: 500ms, 1s, 1m, 1h30m; --per second|minute|hour|day
may replace --interval.
A keyed policy applies its limits per key (--key K), each --limit SPEC one
limit: RATE/INTERVAL[,algorithm=A][,burst=N][,capacity=N], e.g. 10/1s, 1000/1h.
Exit status: 0 success (acquire: granted), 1 acquire refused, 2 bad usage or error.
Run 'redlimit help COMMAND' or 'redlimit COMMAND -h' for a command's flags.
`

// usage writes the command's usage: the synopses and summaries of the
// command table, then what every command shares.
func usage(w io.Writer) {
	fmt.Fprint(w, usageHead)
	for _, cmd := range commands {
		for _, form := range forms(cmd) {
			fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf("  redlimit %-9s %s", cmd.name, indent(form, 21)), " "))
		}
	}
	fmt.Fprint(w, "\nCommands:\n")
	for _, cmd := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", cmd.name, cmd.summary)
	}
	var stores []string
	for _, cmd := range commands {
		if !cmd.noStore {
			stores = append(stores, cmd.name)
		}
	}
	fmt.Fprintf(w, "\n%s also take, before or after NAME:", strings.Join(stores, ", "))
	fmt.Fprintf(w, usageTail, algorithmsLine())
}

// commandHelp writes cmd's help: its synopsis, what it does and its flags
// (what 'redlimit COMMAND -h' prints).
func commandHelp(w io.Writer, cmd *command) {
	if cmd.passFlags {
		fmt.Fprintf(w, "%s\n%s\n", synopsisLine(cmd), cmd.help)
		return
	}
	// The flags are defined where they are parsed, in the command's run:
	// it prints this help for -h before it touches anything.
	c := &cli{stdout: w, stderr: w}
	cmd.run(context.Background(), c, cmd, []string{"-h"})
}

// synopsisLine is "usage: redlimit NAME SYNOPSIS", its continuation lines
// aligned under the first argument, and "   or: redlimit NAME ..." for each
// other form.
func synopsisLine(cmd *command) string {
	var b strings.Builder
	for i, form := range forms(cmd) {
		head := "usage: redlimit " + cmd.name + " "
		if i > 0 {
			b.WriteString("\n")
			head = "   or: redlimit " + cmd.name + " "
		}
		b.WriteString(head + indent(form, len(head)))
	}
	return b.String()
}

// forms splits cmd's synopsis into its forms: a line that starts with
// "NAME " after the first begins another.
func forms(cmd *command) []string {
	var out []string
	for i, line := range strings.Split(cmd.synopsis, "\n") {
		if i == 0 || strings.HasPrefix(line, "NAME ") {
			out = append(out, line)
		} else {
			out[len(out)-1] += "\n" + line
		}
	}
	return out
}

// indent indents the lines of s after the first by n spaces.
func indent(s string, n int) string {
	return strings.ReplaceAll(s, "\n", "\n"+strings.Repeat(" ", n))
}
