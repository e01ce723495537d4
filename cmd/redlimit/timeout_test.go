package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/internal/syncbuf"
)

// callReturning runs the command like call, failing the test (instead of
// hanging until go test's own timeout kills everything) when it has not
// returned a little before the test's deadline. Nothing is timed: the run
// only has to return.
func callReturning(t *testing.T, d deps, args ...string) result {
	t.Helper()
	done := make(chan result, 1)
	go func() {
		var stdout, stderr syncbuf.Buffer
		code := run(context.Background(), args, &stdout, &stderr, d)
		done <- result{code, stdout.String(), stderr.String()}
	}()
	var guard <-chan time.Time
	if deadline, ok := t.Deadline(); ok {
		timer := time.NewTimer(time.Until(deadline) * 9 / 10)
		defer timer.Stop()
		guard = timer.C
	}
	select {
	case r := <-done:
		return r
	case <-guard:
		t.Fatalf("redlimit %q has not returned by the test's deadline", args)
		return result{}
	}
}

// TestTimeoutTLSOnPlainPort: rediss:// to a plain Redis port makes the TLS
// handshake wait for an answer that never comes (it took 25 s: five dials
// of go-redis's default 5 s). --timeout bounds it for every command that
// talks to Redis, which then says what went wrong.
func TestTimeoutTLSOnPlainPort(t *testing.T) {
	srv := redistest.Start(t)
	url := "rediss://" + srv.Addr
	for _, args := range [][]string{
		{"get", "x"},
		{"get", "x", "--redisson"},
		{"set-rate", "x", "--rate", "1", "--per", "second"},
		{"acquire", "x"},
		{"acquire", "x", "--wait", "100ms"},
		{"delete", "x"},
		{"demo", "--callers", "2"},
		{"migrate", "x"},
	} {
		r := callReturning(t, deps{}, append(args, "--redis", url, "--timeout", "200ms")...)
		if r.code != exitError || r.stdout != "" ||
			!strings.Contains(r.stderr, "redlimit "+args[0]+": no answer from Redis within --timeout 200ms (the URL asks for TLS, rediss://: does the server speak TLS on that port?)") {
			t.Errorf("redlimit %q against a plain port: %s; want exit 2 and the timeout named", args, r)
		}
	}
}

// TestTimeoutPausedRedis: a Redis that accepts the connection but answers
// nothing (SIGSTOP) fails the call within --timeout.
func TestTimeoutPausedRedis(t *testing.T) {
	srv := redistest.Start(t)
	d := deps{Clock: clock.NewFake(t0)}
	if r := call(t, d, "set-rate", "p", "--rate", "1", "--per", "second", "--redis", srv.URL()); r.code != exitOK {
		t.Fatalf("set-rate: %s", r)
	}
	srv.Pause()
	t.Cleanup(srv.Resume)
	for _, args := range [][]string{{"get", "p"}, {"acquire", "p"}} {
		r := callReturning(t, d, append(args, "--redis", srv.URL(), "--timeout", "100ms")...)
		if r.code != exitError || !strings.Contains(r.stderr, "redlimit "+args[0]+": no answer from Redis within --timeout 100ms: store unavailable") {
			t.Errorf("redlimit %q against a paused Redis: %s; want exit 2 and the timeout named", args, r)
		}
	}
}

// TestTimeoutSetsClientTimeouts: --timeout becomes the client's dial, read
// and write timeouts, for one server, Sentinel and Cluster URLs, unless the
// URL sets its own.
func TestTimeoutSetsClientTimeouts(t *testing.T) {
	c := &cli{}
	for _, tc := range []struct {
		url                 string
		dial, read, write   time.Duration
		sentinel, isCluster bool
	}{
		{url: "redis://127.0.0.1:1/0", dial: 250 * time.Millisecond, read: 250 * time.Millisecond, write: 250 * time.Millisecond},
		{url: "rediss://127.0.0.1:1?", dial: 250 * time.Millisecond, read: 250 * time.Millisecond, write: 250 * time.Millisecond},
		{url: "redis://127.0.0.1:1?read_timeout=2s", dial: 250 * time.Millisecond, read: 2 * time.Second, write: 250 * time.Millisecond},
		{url: "redis+sentinel://127.0.0.1:1?master_name=m&addr=127.0.0.1:2", dial: 250 * time.Millisecond, read: 250 * time.Millisecond, write: 250 * time.Millisecond, sentinel: true},
		{url: "redis+cluster://127.0.0.1:1?addr=127.0.0.1:2&dial_timeout=1s", dial: time.Second, read: 250 * time.Millisecond, write: 250 * time.Millisecond, isCluster: true},
	} {
		rdb, err := c.newRedisClient(&storeFlags{redisURL: tc.url, timeout: 250 * time.Millisecond})
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		var dial, read, write time.Duration
		switch rc := rdb.(type) {
		case *redis.Client:
			o := rc.Options()
			dial, read, write = o.DialTimeout, o.ReadTimeout, o.WriteTimeout
		case *redis.ClusterClient:
			o := rc.Options()
			dial, read, write = o.DialTimeout, o.ReadTimeout, o.WriteTimeout
		default:
			t.Errorf("%s: a %T", tc.url, rdb)
		}
		_ = rdb.Close()
		if dial != tc.dial || read != tc.read || write != tc.write {
			t.Errorf("%s: dial %s, read %s, write %s; want %s, %s, %s", tc.url, dial, read, write, tc.dial, tc.read, tc.write)
		}
	}
}

// TestRedisURLWithoutScheme: host:port is not a URL; the error shows the
// URL meant, without echoing what may hold a password.
func TestRedisURLWithoutScheme(t *testing.T) {
	for _, tc := range []struct {
		url, stderr string
	}{
		{"localhost:6379", "redlimit get: --redis (or $REDIS_URL) takes a URL: redis://localhost:6379 (rediss:// for TLS"},
		{"user:secret@localhost:6379", "redlimit get: --redis (or $REDIS_URL) takes a URL: redis://host:6379 ("},
	} {
		r := call(t, deps{}, "get", "x", "--redis", tc.url)
		if r.code != exitError || !strings.Contains(r.stderr, tc.stderr) || strings.Contains(r.stderr, "secret") {
			t.Errorf("get --redis %s: %s; want %q", tc.url, r, tc.stderr)
		}
	}
}
