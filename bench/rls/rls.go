// Package rls compares two services of Envoy's rate-limit protocol (RLS v3,
// gRPC envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) given
// only their addresses: redlimit serve beside envoyproxy/ratelimit, or any
// two builds of either.
//
// Decisions sends both the same bursts of single-descriptor requests, each
// burst inside one fixed window, and compares the answers call by call.
// Measure runs closed-loop load on each in turn, round after round, and
// reports decisions/s and latency with the ratios taken within each round.
//
// Both services must read the same rules; Rules is the file the comparison
// was written for (docs/bench.md, "Beside envoyproxy/ratelimit"). Each
// system gets descriptor values of its own, so two services on one Redis
// never share a count.
package rls

import (
	_ "embed"
	"fmt"
	"regexp"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Rules is rules.yaml: domain "rlscompare", descriptor key "cmp" limited to
// 20 per second (a fixed window, the decisions), key "load" to 10^9 per
// second (every call granted, the load).
//
//go:embed rules.yaml
var Rules []byte

// The domain and descriptor keys of Rules, the defaults of Options and
// LoadOptions.
const (
	Domain     = "rlscompare"
	CompareKey = "cmp"
	LoadKey    = "load"
)

// System is one service under comparison.
type System struct {
	// Name labels it in reports: letters, digits, '.', '_' and '-'; it
	// is also part of the descriptor values it is sent.
	Name string
	// Addr is its gRPC address, host:port (plaintext).
	Addr string
	// PID, when set, is its process on this machine: Measure then
	// reports its CPU per decision (from /proc; Linux only).
	PID int
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,32}$`)

func checkSystems(a, b System) error {
	for _, s := range []System{a, b} {
		if !nameRE.MatchString(s.Name) {
			return fmt.Errorf("rls: system name %q: want 1-32 letters, digits, '.', '_' or '-'", s.Name)
		}
		if s.Addr == "" {
			return fmt.Errorf("rls: system %s: no address", s.Name)
		}
	}
	if a.Name == b.Name {
		return fmt.Errorf("rls: both systems are named %q", a.Name)
	}
	return nil
}

// dial opens one client connection to s, with the same settings for every
// system: plaintext, gRPC's defaults otherwise.
func dial(s System) (*grpc.ClientConn, rlsv3.RateLimitServiceClient, error) {
	cc, err := grpc.NewClient(s.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("rls: %s at %s: %w", s.Name, s.Addr, err)
	}
	return cc, rlsv3.NewRateLimitServiceClient(cc), nil
}

// request is a request of one descriptor of one entry, charging 1.
func request(domain, key, value string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: value}},
	}}}
}
