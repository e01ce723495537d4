package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redissonstore"
)

// redissonSide starts a Redis and returns it with a fake clock and a store
// in Redisson's layout on that clock: the Java side the commands read.
func redissonSide(t *testing.T) (*redistest.Server, *clock.Fake, *redissonstore.Store) {
	t.Helper()
	srv := redistest.Start(t)
	fake := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	java, err := redissonstore.New(srv.Client(t), redissonstore.WithTimeSource(fake))
	if err != nil {
		t.Fatal(err)
	}
	return srv, fake, java
}

// TestRedissonCommands: a limiter written in Redisson's layout (as a Java
// service would) is shown by get --redisson and migrated by migrate, after
// which the native limiter is exactly as exhausted.
func TestRedissonCommands(t *testing.T) {
	srv, fake, java := redissonSide(t)
	d := deps{Clock: fake}
	ctx := context.Background()
	l, _ := redlimit.New(java, "orders", redlimit.WithClock(fake))
	if _, err := l.TrySetRate(ctx, redlimit.PerInterval(2, time.Minute)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if r, err := l.TryAcquire(ctx, 1); err != nil || !r.Allowed {
			t.Fatalf("Redisson-side grant: %+v, %v", r, err)
		}
	}
	redis := []string{"--redis", srv.URL()}

	got := call(t, d, append([]string{"get", "orders", "--redisson"}, redis...)...)
	if got.code != exitOK || !strings.Contains(got.stdout, "orders") {
		t.Fatalf("get --redisson: %v", got)
	}
	got = call(t, d, append([]string{"get", "orders", "--redisson", "--json"}, redis...)...)
	if got.code != exitOK {
		t.Fatalf("get --redisson --json: %v", got)
	}
	var in inspectionJSON
	decodeOne(t, got.stdout, &in)
	if in.Name != "orders" || !in.Initialized || in.Config == nil || in.Config.Rate != 2 || len(in.States) != 1 ||
		in.States[0].InUse != 2 || len(in.States[0].Grants) != 2 || in.States[0].Grants[0].Error != "" {
		t.Fatalf("get --redisson --json: %+v", in)
	}

	got = call(t, d, append([]string{"migrate", "orders", "--json"}, redis...)...)
	if got.code != exitOK {
		t.Fatalf("migrate --json: %v", got)
	}
	var m migrationJSON
	decodeOne(t, got.stdout, &m)
	if m.Name != "orders" || m.Config.Rate != 2 || len(m.States) != 1 || m.States[0].Carried != 2 {
		t.Fatalf("migrate --json: %+v", m)
	}
	got = call(t, d, append([]string{"migrate", "orders"}, redis...)...)
	if got.code != exitOK || !strings.Contains(got.stdout, `migrated "orders"`) || !strings.Contains(got.stdout, "Overall: 2 grants replayed, 2 permits carried") {
		t.Fatalf("migrate: %v", got)
	}
	// The native limiter holds the 2 permits still in use: refused.
	got = call(t, d, append([]string{"acquire", "orders"}, redis...)...)
	if got.code != exitRefused {
		t.Fatalf("native acquire after migrating an exhausted limiter: %v; want refused", got)
	}
	fake.Advance(time.Minute)
	if got = call(t, d, append([]string{"acquire", "orders"}, redis...)...); got.code != exitOK {
		t.Fatalf("a minute later: %v; want granted", got)
	}
	// Without Redis there is nothing to read.
	if got = call(t, d, "get", "orders", "--redisson"); got.code != exitError || !strings.Contains(got.stderr, "--redis") {
		t.Fatalf("get --redisson without Redis: %v", got)
	}
}

// TestGetRedissonPerClientAndMissing: get --redisson on a PER_CLIENT
// limiter lists the state of every client it finds (or of those named); on
// a missing limiter, or keys without a config, it exits 2 saying so.
func TestGetRedissonPerClientAndMissing(t *testing.T) {
	srv, fake, java := redissonSide(t)
	d := deps{Clock: fake}
	ctx := context.Background()
	for _, client := range []string{"svc-a", "svc-b"} {
		l, _ := redlimit.New(java, "per", redlimit.WithClock(fake), redlimit.WithClientID(client))
		if err := l.SetRate(ctx, redlimit.PerInterval(3, time.Minute).WithMode(redlimit.PerClient)); err != nil {
			t.Fatal(err)
		}
		if r, err := l.TryAcquire(ctx, 2); err != nil || !r.Allowed {
			t.Fatalf("Redisson-side grant for %s: %+v, %v", client, r, err)
		}
	}
	redis := []string{"--redis", srv.URL()}

	got := call(t, d, append([]string{"get", "per", "--redisson"}, redis...)...)
	for _, want := range []string{"3 per 1m0s (sliding-log, per-client)", "overall (not used: the limiter is PER_CLIENT)",
		"client svc-a: 1 left, 2 in use, counter 1", "client svc-b: 1 left, 2 in use, counter 1"} {
		if got.code != exitOK || got.stderr != "" || !strings.Contains(got.stdout, want) {
			t.Errorf("get --redisson of a PER_CLIENT limiter: %s; want %q", got, want)
		}
	}
	got = call(t, d, append([]string{"get", "per", "--redisson", "--json"}, redis...)...)
	var in inspectionJSON
	decodeOne(t, got.stdout, &in)
	if got.code != exitOK || !in.ClientsScanned || len(in.States) != 3 || in.States[1].Client != "svc-a" || in.States[1].Value == nil ||
		*in.States[1].Value != 1 || len(in.States[1].Grants) != 1 || in.States[2].Client != "svc-b" || in.States[2].InUse != 2 {
		t.Errorf("get --redisson --json of a PER_CLIENT limiter: %s: %+v", got, in)
	}
	// Named clients: those alone, no scan.
	got = call(t, d, append([]string{"get", "per", "--redisson", "--client", "svc-b", "--json"}, redis...)...)
	in = inspectionJSON{}
	decodeOne(t, got.stdout, &in)
	if got.code != exitOK || in.ClientsScanned || len(in.States) != 2 || in.States[1].Client != "svc-b" {
		t.Errorf("get --redisson --client svc-b --json: %s: %+v", got, in)
	}

	// Missing: exit 2, nothing on stdout, the key named.
	for _, args := range [][]string{{"get", "nope", "--redisson"}, {"get", "nope", "--redisson", "--json"}} {
		got = call(t, d, append(args, redis...)...)
		if got.code != exitError || got.stdout != "" ||
			got.stderr != `redlimit get: no Redisson rate limiter "nope" in this Redis: no key "nope" (nor its state); Redisson keys have no prefix, and --layout current was read`+"\n" {
			t.Errorf("redlimit %q: %s; want exit 2 and the missing limiter named", args, got)
		}
	}
	// A counter without its hash: shown, and exit 2.
	if err := srv.Client(t).Set(ctx, "{half}:value", 3, 0).Err(); err != nil {
		t.Fatal(err)
	}
	got = call(t, d, append([]string{"get", "half", "--redisson"}, redis...)...)
	if got.code != exitError || !strings.Contains(got.stdout, "counter 3") || !strings.Contains(got.stderr, `Redisson rate limiter "half" is not initialized`) {
		t.Errorf("get --redisson of a counter without its hash: %s", got)
	}
}
