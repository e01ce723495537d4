package grpclimit_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/grpclimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
)

// When the store dies, each policy answers as its failure policy says: a
// FailOpen policy lets calls through with the degraded header, counted; a
// FailClosed one fails them with Unavailable.
func TestStoreFailureFollowsFailurePolicy(t *testing.T) {
	srv := redistest.Start(t)
	rs, err := redisstore.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() }) // before the client's
	policy := func(name string, fp redlimit.FailurePolicy) *redlimit.Policy {
		cfg, _ := redlimit.ParseLimit("100/1m")
		p, err := redlimit.NewPolicy(rs, name, []redlimit.Config{cfg}, redlimit.WithFailurePolicy(fp), redlimit.WithClock(clock.Real))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	open := newLimiter(t, []grpclimit.Rule{{Policy: policy("open", redlimit.FailOpen)}})
	closed := newLimiter(t, []grpclimit.Rule{{Policy: policy("closed", redlimit.FailClosed)}})
	co, cc := serveLimited(t, open), serveLimited(t, closed)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var hdr metadata.MD
	if err := check(ctx, co, grpc.Header(&hdr)); err != nil || len(hdr.Get(grpclimit.DegradedHeader)) != 0 {
		t.Fatalf("store up: %v, header %v", err, hdr)
	}
	if err := check(ctx, cc); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	if err := check(ctx, co, grpc.Header(&hdr)); err != nil {
		t.Fatalf("FailOpen with the store down: %v", err)
	}
	if got := hdr.Get(grpclimit.DegradedHeader); len(got) != 1 || got[0] != "open" {
		t.Errorf("degraded header %q, want [open]", got)
	}
	if s := open.Stats(); s.Degraded != 1 || s.Allowed != 2 {
		t.Errorf("FailOpen stats %+v, want 1 degraded of 2 allowed", s)
	}
	if err := check(ctx, cc); status.Code(err) != codes.Unavailable {
		t.Errorf("FailClosed with the store down: %v, want Unavailable", err)
	}
	if s := closed.Stats(); s.Failed != 1 {
		t.Errorf("FailClosed stats %+v, want 1 failed", s)
	}
}
