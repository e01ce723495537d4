package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// benchCmd is "redlimit bench".
var benchCmd = &command{
	name:      "bench",
	summary:   "measure redlimit beside its peers (runs the source tree's bench/ module)",
	synopsis:  "[--quick] [--duration 3s] [--callers 1,8,64,256] [--json FILE] [--svg FILE] [--redis URL] ...",
	noStore:   true,
	passFlags: true,
	run:       cmdBench,
	help: `
Runs the benchmark of the source tree (bench/, a Go module of its own) with
"go run . FLAGS" there, found by walking up from the working directory: it
needs the source tree and the Go toolchain, as its peers (redis_rate,
x/time/rate) are not compiled into this command on purpose. Every flag goes
to it; "redlimit bench -h" lists them. See bench/README.md.`,
}

// benchCWDEnv tells the benchmark the caller's directory, so that relative
// --json and --svg paths mean what the caller meant (it runs in bench/).
const benchCWDEnv = "REDLIMIT_BENCH_CWD"

// cmdBench is "redlimit bench": it runs the benchmark program of the source
// tree (bench/, a module of its own) with "go run . ARGS", streaming its
// output. The peers it measures are not compiled into this command on
// purpose: they would enter redlimit's go.mod.
func cmdBench(ctx context.Context, c *cli, cmd *command, args []string) int {
	wd, err := os.Getwd()
	if err != nil {
		return c.errorf(cmd, "%v", err)
	}
	dir, err := findBenchDir(wd)
	if err != nil {
		return c.errorf(cmd, "%v", err)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return c.errorf(cmd, "the benchmark runs with the Go toolchain (go run), which is not on PATH: %v", err)
	}
	run := exec.CommandContext(ctx, goTool, append([]string{"run", "."}, args...)...)
	run.Dir = dir
	run.Env = append(os.Environ(), benchCWDEnv+"="+wd)
	run.Stdout, run.Stderr = c.stdout, c.stderr
	// On interrupt the benchmark stops its redis-server and exits; give it
	// the time to.
	run.Cancel = func() error { return run.Process.Signal(os.Interrupt) }
	run.WaitDelay = 15 * time.Second
	if err := run.Run(); err != nil {
		if ctx.Err() != nil {
			return c.errorf(cmd, "interrupted")
		}
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exitError // the benchmark said why on stderr
		}
		return c.errorf(cmd, "running the benchmark in %s: %v", dir, err)
	}
	return exitOK
}

// findBenchDir returns the bench/ directory holding the benchmark's go.mod
// in dir or the nearest parent that has one.
func findBenchDir(dir string) (string, error) {
	start := dir
	for {
		p := filepath.Join(dir, "bench")
		if st, err := os.Stat(filepath.Join(p, "go.mod")); err == nil && st.Mode().IsRegular() {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no bench/go.mod in %s or any parent: run it from within redlimit's source tree "+
				"(the benchmark is a module of its own, run with go run; its peers are not compiled into this command on purpose)", start)
		}
		dir = parent
	}
}
