package serve_test

import (
	"path/filepath"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/serve"
	"github.com/redlimit/redlimit/serve/decide"
)

// TestTwoInstancesShareOneStore runs two servers on one store, as two
// instances on one Redis: a key's count is shared, and both reload the
// same rules file.
func TestTwoInstancesShareOneStore(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "rules.yaml")
	replace(t, file, limitRules(3))
	fake := clock.NewFake(t0)
	store := memstore.New(memstore.WithTimeSource(fake))
	evA, evB := make(reloads, 16), make(reloads, 16)
	a := start(t, serve.Config{Rules: file, Store: store, Decide: decide.Options{Clock: fake}, OnReload: func(r serve.Reload) { evA <- r }})
	b := start(t, serve.Config{Rules: file, Store: store, Decide: decide.Options{Clock: fake}, OnReload: func(r serve.Reload) { evB <- r }})
	<-a.srv.Watching()
	<-b.srv.Watching()
	ca, cb := rlsClient(t, a.grpcAddr), rlsClient(t, b.grpcAddr)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", "shared")}}
	for i, c := range []rlsv3.RateLimitServiceClient{ca, cb, ca} {
		if resp := call(t, c, req); resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != uint32(2-i) {
			t.Fatalf("call %d: %v", i, resp)
		}
	}
	if resp := call(t, cb, req); resp.OverallCode != over {
		t.Fatalf("4th call, on B: %v", resp)
	}

	replace(t, file, limitRules(100))
	for _, ev := range []serve.Reload{evA.next(t), evB.next(t)} {
		if ev.Err != nil {
			t.Fatal(ev.Err)
		}
	}
	for _, c := range []rlsv3.RateLimitServiceClient{ca, cb} {
		if resp := call(t, c, req); resp.OverallCode != ok || resp.Statuses[0].CurrentLimit.RequestsPerUnit != 100 {
			t.Fatalf("after the reload: %v", resp)
		}
	}
}
