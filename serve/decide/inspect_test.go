package decide_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/serve/decide"
)

// TestInspect reads a key's state on each limit without charging it.
func TestInspect(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, testRules, decide.Options{})
	e.decide(1, desc("tenant", "acme"))
	for range 2 { // looking charges nothing
		r, res, err := e.d.Inspect(ctx, "edge", desc("tenant", "acme").Entries)
		if err != nil || r == nil || r.Path != "tenant" || !res.Allowed || res.Remaining != 1 || len(res.Limits) != 2 {
			t.Fatalf("%v %+v %v", r, res, err)
		}
		if l := res.Limits[1]; l.Remaining != 2 || l.ResetAfter != 40*time.Second {
			t.Fatalf("per-minute: %+v", l)
		}
	}
	e.decide(1, desc("tenant", "acme"))
	if _, res, _ := e.d.Inspect(ctx, "edge", desc("tenant", "acme").Entries); res.Allowed || res.Limits[0].Remaining != 0 {
		t.Fatalf("used up: %+v", res)
	}
	if r, res, err := e.d.Inspect(ctx, "edge", desc("client", "internal").Entries); err != nil || r == nil || !r.Unlimited || len(res.Limits) != 0 {
		t.Fatalf("unlimited: %v %+v %v", r, res, err)
	}
	if r, _, err := e.d.Inspect(ctx, "nowhere", desc("k", "v").Entries); r != nil || err != nil {
		t.Fatalf("no rule: %v %v", r, err)
	}
	if _, _, err := e.d.Inspect(ctx, "edge", nil); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Fatalf("no entries: %v", err)
	}
}
