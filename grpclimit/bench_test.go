package grpclimit_test

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/grpclimit"
	"github.com/redlimit/redlimit/memstore"
)

// BenchmarkUnaryServerInterceptor measures what the interceptor adds to a
// unary call on the memory store, keyed per peer IP over 256 peers (no
// network: the handler returns at once).
func BenchmarkUnaryServerInterceptor(b *testing.B) {
	cfg, err := redlimit.ParseLimit("1000000000/1s,algorithm=token-bucket")
	if err != nil {
		b.Fatal(err)
	}
	p, err := redlimit.NewPolicy(memstore.New(), "bench", []redlimit.Config{cfg})
	if err != nil {
		b.Fatal(err)
	}
	l, err := grpclimit.New([]grpclimit.Rule{{Policy: p}})
	if err != nil {
		b.Fatal(err)
	}
	icpt := l.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: checkMethod}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	ctxs := make([]context.Context, 256)
	for i := range ctxs {
		ctxs[i] = peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, byte(i)), Port: 40000}})
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := icpt(ctxs[i%len(ctxs)], nil, info, handler); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}
