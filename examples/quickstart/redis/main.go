// Command redis is the README's quick start on Redis: every process that
// runs it against the same Redis shares one limit. Run it with
// `go run ./examples/quickstart/redis -redis localhost:6379` (the default,
// or $REDIS_ADDR).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/redisstore"
)

func main() {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "localhost:6379"
	}
	flag.StringVar(&addr, "redis", addr, "the Redis server's `host:port`")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := run(ctx, addr, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, addr string, out io.Writer) error {
	// MaxRetries -1: a command is never sent twice (a retried script could
	// grant twice). ContextTimeoutEnabled: the client keeps to ctx's deadline.
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer rdb.Close()
	store, err := redisstore.New(rdb) // NewFailoverClient (Sentinel) works too; NewClusterClient with MaxRedirects: -1
	if err != nil {
		return err
	}

	// 60 permits in any window of 1 minute. The config lives in Redis with the
	// limiter, for every process: TrySetRate stores it if none is stored yet,
	// and names the stored one if it differs (SetRate changes it).
	cfg := redlimit.PerMinute(60)
	l, err := redlimit.New(store, "quickstart", redlimit.WithConfig(cfg)) // WithConfig: restored if Redis loses it
	if err != nil {
		return err
	}
	if _, err := l.TrySetRate(ctx, cfg); errors.Is(err, redlimit.ErrConfigMismatch) {
		fmt.Fprintln(out, "keeping the stored config:", err)
	} else if err != nil {
		return err // errors.Is(err, redlimit.ErrUnavailable): Redis could not be reached in time
	}

	r, err := l.TryAcquire(ctx, 1) // now or never
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "TryAcquire(1): allowed=%v, %d left\n", r.Allowed, r.Remaining)

	r, err = l.TryAcquireWait(ctx, 5, time.Second) // wait up to 1 s for 5 permits, in line
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "TryAcquireWait(5, 1s): allowed=%v, %d left\n", r.Allowed, r.Remaining)

	r, err = l.Acquire(ctx, 1) // wait as long as ctx allows
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Acquire(1): allowed=%v, %d left\n", r.Allowed, r.Remaining)
	return nil
}
