package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/redlimit/redlimit/internal/redistest"
)

// TestQuickStartRedis runs the README's Redis quick start twice against a
// real redis-server, as two processes would: the second run finds the
// config the first stored and shares its limit.
func TestQuickStartRedis(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var first, second bytes.Buffer
	if err := run(ctx, srv.Addr, &first); err != nil {
		t.Fatalf("first run: %v\n%s", err, first.String())
	}
	if err := run(ctx, srv.Addr, &second); err != nil {
		t.Fatalf("second run: %v\n%s", err, second.String())
	}
	// 60 per minute: the first run takes 1 + 5 + 1 permits, the second 7 more
	// of the same window.
	want := []string{
		"TryAcquire(1): allowed=true, 59 left\nTryAcquireWait(5, 1s): allowed=true, 54 left\nAcquire(1): allowed=true, 53 left\n",
		"TryAcquire(1): allowed=true, 52 left\nTryAcquireWait(5, 1s): allowed=true, 47 left\nAcquire(1): allowed=true, 46 left\n",
	}
	for i, got := range []string{first.String(), second.String()} {
		if got != want[i] {
			t.Errorf("run %d printed\n%s\nwant\n%s", i+1, got, want[i])
		}
	}
}
