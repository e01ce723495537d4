package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/redlimit/redlimit/bench/rls"
)

func TestPrintRules(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"--print-rules"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), rls.Rules) {
		t.Errorf("printed %q", out.String())
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--a", "redlimit", "--b", "envoy=127.0.0.1:1"},
		{"--a", "redlimit=127.0.0.1:1", "--b", "=127.0.0.1:2"},
		{"--a", "a=127.0.0.1:1", "--b", "b=127.0.0.1:2", "--callers", "1,x"},
		{"--a", "a=127.0.0.1:1", "--b", "b=127.0.0.1:2", "--rounds", "0"},
		{"--a", "a=127.0.0.1:1", "--b", "b=127.0.0.1:2", "extra"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), args, &out, &errOut)
		if err == nil || out.Len() != 0 {
			t.Errorf("%s: err %v, out %q", strings.Join(args, " "), err, out.String())
		}
	}
}

// TestServeFloor: --serve-floor answers a real gRPC client until
// interrupted, then says how many calls it answered.
func TestServeFloor(t *testing.T) {
	// A free port, let go for the command to take.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"--serve-floor", addr}, &out, &errOut) }()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	// WaitForReady: the call waits for the command to listen.
	resp, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: rls.Domain}, grpc.WaitForReady(true))
	cc.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("answer %v, %v", resp, err)
	}
	if !strings.Contains(errOut.String(), "grpc floor: 1 calls answered") {
		t.Errorf("stderr %q", errOut.String())
	}
}
