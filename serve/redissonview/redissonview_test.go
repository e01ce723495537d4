package redissonview_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redissonstore"
	"github.com/redlimit/redlimit/serve/redissonview"
)

// TestFind: the Redisson limiters on a Redis are listed with their state;
// other hashes and keys are not.
func TestFind(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	rs, err := redissonstore.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	l, err := redlimit.New(rs, "orders", redlimit.WithClientID("svc"))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetRate(ctx, redlimit.PerInterval(10, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if r, err := l.TryAcquire(ctx, 3); err != nil || !r.Allowed {
		t.Fatalf("%+v %v", r, err)
	}
	rdb.HSet(ctx, "not-a-limiter", "rate", "1")
	rdb.Set(ctx, "plain", "x", 0)

	srv := httptest.NewServer(redissonview.Handler(rdb))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list redissonview.List
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	if len(list.Limiters) != 1 || list.Truncated {
		t.Fatalf("%+v", list)
	}
	got := list.Limiters[0]
	if got.Name != "orders" || !got.Initialized || got.Limit == "" || len(got.States) != 1 || got.States[0].Left != 7 || got.States[0].InUse != 3 {
		t.Fatalf("%+v", got)
	}
	resp2, err := http.Get(srv.URL + "?layout=nope")
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusBadRequest {
		t.Fatalf("bad layout: %d", resp2.StatusCode)
	}
}

// TestFindOnCluster: on a Redis Cluster every primary is scanned, so the
// limiters on each of them are listed.
func TestFindOnCluster(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.StartCluster(t, 3, 0).Client(t)
	rs, err := redissonstore.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	primaries := map[string]bool{}
	want := map[string]bool{}
	for i := 0; len(primaries) < 3 || len(want) < 9; i++ {
		if i == 100 {
			t.Fatalf("100 names on %d primaries", len(primaries))
		}
		name := fmt.Sprint("orders-", i)
		m, err := rdb.MasterForKey(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		primaries[m.Options().Addr] = true
		l, err := redlimit.New(rs, name, redlimit.WithClientID("svc"))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.SetRate(ctx, redlimit.PerInterval(10, time.Minute)); err != nil {
			t.Fatal(err)
		}
		if r, err := l.TryAcquire(ctx, 2); err != nil || !r.Allowed {
			t.Fatalf("%+v %v", r, err)
		}
		want[name] = true
	}
	list, err := redissonview.Find(ctx, rdb, redissonstore.Current)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Limiters) != len(want) || list.Truncated {
		t.Fatalf("%d limiters listed of %d: %+v", len(list.Limiters), len(want), list)
	}
	for _, l := range list.Limiters {
		if !want[l.Name] || len(l.States) != 1 || l.States[0].Left != 8 {
			t.Fatalf("%+v", l)
		}
	}
}
