package serve_test

import (
	"context"
	"errors"
	"io/fs"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/memstore"
	"github.com/redlimit/redlimit/serve"
	"github.com/redlimit/redlimit/serve/decide"
)

// t0 is 20s into a minute, 5m20s into a 10-minute window.
var t0 = time.Date(2026, 11, 23, 10, 5, 20, 0, time.UTC)

type testServer struct {
	srv      *serve.Server
	clock    *clock.Fake
	grpcAddr string
	httpAddr string
}

// start serves cfg on loopback with a fake clock until the test ends.
func start(t testing.TB, cfg serve.Config) *testServer {
	t.Helper()
	fake, _ := cfg.Decide.Clock.(*clock.Fake)
	if fake == nil {
		fake = clock.NewFake(t0)
		cfg.Decide.Clock = fake
	}
	if cfg.Store == nil {
		cfg.Store = memstore.New(memstore.WithTimeSource(fake))
	}
	ts, _ := startStoppable(t, cfg)
	ts.clock = fake
	return ts
}

func TestNewRejectsBadConfig(t *testing.T) {
	if _, err := serve.New(context.Background(), serve.Config{}); !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Errorf("no rules: %v", err)
	}
	if _, err := serve.New(context.Background(), serve.Config{Rules: "testdata/missing.yaml"}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing rules: %v", err)
	}
	_, err := serve.New(context.Background(), serve.Config{Rules: "testdata/edge.yaml", Decide: decide.Options{MaxEntries: -1}})
	if !errors.Is(err, redlimit.ErrInvalidArgument) {
		t.Errorf("negative bound: %v", err)
	}
}
