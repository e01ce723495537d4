package traffic_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/serve/traffic"
)

var t0 = time.Date(2026, 11, 23, 10, 5, 20, 0, time.UTC)

func event(policy, key string, granted bool, at time.Time) redlimit.Event {
	o := redlimit.OutcomeGranted
	if !granted {
		o = redlimit.OutcomeRefused
	}
	return redlimit.Event{Op: redlimit.OpAcquire, Outcome: o, Name: "serve:" + policy, Policy: true, Key: key, Start: at}
}

func newRecorder(t *testing.T, rdb redis.UniversalClient, c clock.Clock) *traffic.Recorder {
	t.Helper()
	r, err := traffic.New(traffic.Options{Redis: rdb, Clock: c, TopKeys: 3})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func startRedis(t *testing.T) redis.UniversalClient {
	rs := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// TestInstancesAddUp: two instances on one Redis, or on one Redis
// Cluster, each count their own calls; either one reads the sum, per
// policy and second, and the hottest keys of both.
func TestInstancesAddUp(t *testing.T) {
	t.Run("server", func(t *testing.T) { instancesAddUp(t, startRedis(t)) })
	t.Run("cluster", func(t *testing.T) { instancesAddUp(t, redistest.StartCluster(t, 3, 0).Client(t)) })
}

func instancesAddUp(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	fake := clock.NewFake(t0)
	a, b := newRecorder(t, rdb, fake), newRecorder(t, rdb, fake)
	for range 3 {
		a.Observe(ctx, event("edge/remote_address", "10.0.0.1", true, t0))
	}
	a.Observe(ctx, event("edge/remote_address", "10.0.0.1", false, t0))
	b.Observe(ctx, event("edge/remote_address", "10.0.0.2", true, t0.Add(time.Second)))
	b.Observe(ctx, event("api/tenant", "acme", true, t0.Add(time.Second)))
	// Not traffic: a status read and an error.
	b.Observe(ctx, redlimit.Event{Op: redlimit.OpStatus, Outcome: redlimit.OutcomeGranted, Name: "serve:api/tenant", Start: t0})
	b.Observe(ctx, redlimit.Event{Op: redlimit.OpAcquire, Outcome: redlimit.OutcomeError, Name: "serve:api/tenant", Start: t0})
	fake.Advance(time.Second)
	for _, r := range []*traffic.Recorder{a, b} {
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s, err := b.Series(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(s)
	want := `{"from":` + strconv.FormatInt(t0.Unix()-1, 10) + `,"seconds":3,"policies":[` +
		`{"policy":"api/tenant","granted":[0,0,1],"refused":[0,0,0]},` +
		`{"policy":"edge/remote_address","granted":[0,3,1],"refused":[0,1,0]}]}`
	if string(got) != want {
		t.Fatalf("series\n got %s\nwant %s", got, want)
	}
	top, err := a.Top(ctx, "edge/remote_address", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(top) != 2 || top[0] != (traffic.KeyCount{Key: "10.0.0.1", Hits: 4}) || top[1] != (traffic.KeyCount{Key: "10.0.0.2", Hits: 1}) {
		t.Fatalf("top %+v", top)
	}
	// Every key expires (on a Cluster, all under the prefix's hash tag,
	// on one primary).
	var (
		mu      sync.Mutex
		keys    []string
		holders int // primaries holding some
	)
	collect := func(ctx context.Context, c *redis.Client) error {
		ks, err := c.Keys(ctx, traffic.DefaultPrefix+"traffic:*").Result()
		mu.Lock()
		defer mu.Unlock()
		keys = append(keys, ks...)
		if len(ks) > 0 {
			holders++
		}
		return err
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, collect)
	} else {
		err = collect(ctx, rdb.(*redis.Client))
	}
	if holders != 1 {
		t.Errorf("traffic keys on %d primaries", holders)
	}
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys %v %v", keys, err)
	}
	for _, k := range keys {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 || ttl > 5*time.Minute {
			t.Errorf("%s: TTL %v", k, ttl)
		}
	}
}

// TestTopIsBounded: a policy's keys in Redis stay within TopKeys, the
// most counted kept.
func TestTopIsBounded(t *testing.T) {
	ctx := context.Background()
	rdb := startRedis(t)
	fake := clock.NewFake(t0)
	r := newRecorder(t, rdb, fake)
	for i, key := range []string{"a", "b", "c", "d", "e"} {
		for range 10 - i {
			r.Observe(ctx, event("p", key, true, t0))
		}
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := rdb.ZCard(ctx, traffic.DefaultPrefix+"traffic:top:"+strconv.FormatInt(t0.Unix()/60, 10)+":p").Val(); n != 3 {
		t.Fatalf("%d keys kept, want 3", n)
	}
	top, err := r.Top(ctx, "p", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(top) != 3 || top[0].Key != "a" || top[2].Key != "c" {
		t.Fatalf("top %+v", top)
	}
}

// TestMemory: without Redis the same views come from the process.
func TestMemory(t *testing.T) {
	ctx := context.Background()
	fake := clock.NewFake(t0)
	r := newRecorder(t, nil, fake)
	r.Observe(ctx, event("p", "k", true, t0))
	r.Observe(ctx, event("p", "k", false, t0))
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := r.Series(ctx, 1)
	if err != nil || len(s.Policies) != 1 || s.Policies[0].Granted[0] != 1 || s.Policies[0].Refused[0] != 1 {
		t.Fatalf("%+v %v", s, err)
	}
	if top, err := r.Top(ctx, "p", 1); err != nil || len(top) != 1 || top[0].Hits != 2 {
		t.Fatalf("%+v %v", top, err)
	}
	// Past the retention the counts are gone.
	fake.Advance(10 * time.Minute)
	r.Observe(ctx, event("q", "k", true, fake.Now()))
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	s, err = r.Series(ctx, 300)
	if err != nil || len(s.Policies) != 1 || s.Policies[0].Policy != "q" {
		t.Fatalf("%+v %v", s.Policies, err)
	}
}

func TestBadInput(t *testing.T) {
	if _, err := traffic.New(traffic.Options{TopKeys: -1}); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Errorf("New: %v", err)
	}
	r := newRecorder(t, nil, clock.NewFake(t0))
	if _, err := r.Series(context.Background(), 0); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Errorf("Series(0): %v", err)
	}
	if _, err := r.Top(context.Background(), "p", 4); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Errorf("Top(4) over TopKeys: %v", err)
	}
	srv := httptest.NewServer(r.Handler(nil))
	defer srv.Close()
	for _, path := range []string{"/v1/traffic?seconds=x", "/v1/traffic?seconds=100000", "/v1/traffic/top?n=1", "/v1/traffic/top?policy=p&n=0"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
}

// TestStream: the stream sends the recent seconds at once, then one
// event per tick, and ends when the server drains.
func TestStream(t *testing.T) {
	ctx := context.Background()
	fake := clock.NewFake(t0)
	r := newRecorder(t, nil, fake)
	r.Observe(ctx, event("p", "k", true, t0))
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	srv := httptest.NewServer(r.Handler(stop))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/v1/traffic/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	lines := bufio.NewScanner(resp.Body)
	next := func() traffic.Series {
		t.Helper()
		for lines.Scan() {
			if data, ok := strings.CutPrefix(lines.Text(), "data: "); ok {
				var s traffic.Series
				if err := json.Unmarshal([]byte(data), &s); err != nil {
					t.Fatal(err)
				}
				return s
			}
		}
		t.Fatalf("stream ended: %v", lines.Err())
		return traffic.Series{}
	}
	if s := next(); s.Seconds != 5 || s.From != t0.Unix()-4 || len(s.Policies) != 1 || s.Policies[0].Granted[4] != 1 {
		t.Fatalf("first event %+v", s)
	}
	fake.WaitForTimers(1, nil)
	fake.Advance(time.Second)
	if s := next(); s.From != t0.Unix()-3 || s.Policies[0].Granted[3] != 1 {
		t.Fatalf("second event %+v", s)
	}
	fake.WaitForTimers(1, nil)
	close(stop)
	for lines.Scan() {
	}
	if lines.Err() != nil {
		t.Fatal(lines.Err())
	}
}

// TestStreamsBounded: one stream over MaxStreams is answered 503, and
// a closed stream frees its place.
func TestStreamsBounded(t *testing.T) {
	r, err := traffic.New(traffic.Options{MaxStreams: 1})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	srv := httptest.NewServer(r.Handler(stop))
	defer srv.Close()
	open := func() *http.Response {
		t.Helper()
		resp, err := http.Get(srv.URL + "/v1/traffic/stream")
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	first := open()
	if first.StatusCode != http.StatusOK {
		t.Fatalf("first stream: %d", first.StatusCode)
	}
	second := open()
	second.Body.Close()
	if second.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("second stream: %d", second.StatusCode)
	}
	close(stop)
	io.Copy(io.Discard, first.Body) // ends when the server drains
	first.Body.Close()
	third := open()
	third.Body.Close()
	if third.StatusCode != http.StatusOK {
		t.Fatalf("a stream after the first ended: %d", third.StatusCode)
	}
}
