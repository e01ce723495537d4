// Package grpclimit rate-limits gRPC servers with redlimit policies: unary
// and stream server interceptors that charge each call to a key (the
// peer's IP address, an API key from the metadata, the method, or a
// combination) under one or more policies, and refuse with
// codes.ResourceExhausted carrying an errdetails.RetryInfo (when to try
// again, never early) and an errdetails.QuotaFailure (which policy and
// limit refused).
//
//	store := memstore.New() // or redisstore, shared by every instance
//	cfg, _ := redlimit.ParseLimit("10/1s")
//	perIP, _ := redlimit.NewPolicy(store, "per-ip", []redlimit.Config{cfg})
//	lim, _ := grpclimit.New([]grpclimit.Rule{{Policy: perIP, Key: grpclimit.PeerIP()}})
//	srv := grpc.NewServer(
//		grpc.UnaryInterceptor(lim.UnaryServerInterceptor()),
//		grpc.StreamInterceptor(lim.StreamServerInterceptor()))
//
// A Limiter also implements go-grpc-middleware v2's ratelimit.Limiter, for
// servers already built on that package's interceptors; those send a
// refusal without the details, so prefer this package's own.
//
// It is a module of its own (github.com/redlimit/redlimit/grpclimit), so
// that the core module does not depend on gRPC.
package grpclimit
