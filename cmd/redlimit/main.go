package main

//go:generate go test -run ^TestDoc$ . -args -update-doc

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
)

// Exit statuses.
const (
	exitOK      = 0
	exitRefused = 1 // acquire: the permits were not granted
	exitError   = 2 // bad usage, invalid argument, or an error from the store
)

func main() {
	// go-redis logs failed dials on its own; the command reports the error.
	redis.SetLogger(quietLogger{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, deps{LookupEnv: os.LookupEnv})
	stop()
	os.Exit(code)
}

// quietLogger discards go-redis's log.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// deps is what run takes from its surroundings. main passes the real ones;
// tests pass a fake clock and a memory store shared between run calls.
type deps struct {
	// LookupEnv reads the environment (os.LookupEnv); nil reads nothing.
	LookupEnv func(string) (string, bool)
	// Clock, when set, is the time of the limiters and of the stores (the
	// memory store's, and the Redis store's instead of Redis TIME). Nil is
	// the real clock, with Redis keeping its own time.
	Clock clock.Clock
	// MemStore, when set, is the store used without --redis. Nil makes a
	// fresh memory store for each run, as a new process would have.
	MemStore redlimit.Store
}

// cli is one run of the command.
type cli struct {
	stdout, stderr io.Writer
	deps           deps
	// redis is the store flags of the Redis client opened, if any: fail
	// names its timeout.
	redis *storeFlags
	// freshMemory: the store is a memory store made for this run.
	freshMemory bool
}

// run runs the command line args (without the program name) and returns the
// exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, d deps) int {
	c := &cli{stdout: stdout, stderr: stderr, deps: d}
	if len(args) == 0 {
		usage(stderr)
		return exitError
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		name = "help"
	}
	if cmd := lookup(name); cmd != nil {
		return cmd.run(ctx, c, cmd, args[1:])
	}
	fmt.Fprintf(stderr, "redlimit: unknown command %q\nrun 'redlimit help' for usage\n", args[0])
	return exitError
}
