package serve

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/redlimit/redlimit/serve/decide"
)

func wireEntry(k, v string) *ratelimitv3.RateLimitDescriptor_Entry {
	return &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v}
}

// wireCases are requests as Envoy sends them, and what the fast path
// leaves to proto.
var wireCases = []struct {
	name string
	req  *rlsv3.RateLimitRequest
	fast bool // read without proto.Unmarshal
}{
	{"one entry", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{wireEntry("remote_address", "10.0.0.1")}}}}, true},
	{"hits", &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 7, Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{wireEntry("a", "1"), wireEntry("b", "")}, HitsAddend: wrapperspb.UInt64(0)},
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{wireEntry("c", "ü")}, HitsAddend: wrapperspb.UInt64(1 << 40)},
		{},
	}}, true},
	{"empty", &rlsv3.RateLimitRequest{}, true},
	{"large", &rlsv3.RateLimitRequest{Domain: strings.Repeat("d", 2000), Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{wireEntry("k", strings.Repeat("v", 300))}}}}, true},
	{"override", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{wireEntry("a", "1")},
		Limit:   &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_MINUTE, UnitMultiplier: wrapperspb.UInt32(2)},
	}}}, false},
	{"negative hits", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{wireEntry("a", "1")}, IsNegativeHits: true}}}, false},
}

// fromWire decodes b as the gRPC handler does.
func fromWire(b []byte) (*wireRequest, error) {
	w := new(wireRequest)
	if err := newCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, w); err != nil {
		return nil, err
	}
	if w.full != nil {
		if err := w.fromProto(w.full); err != nil {
			return nil, err
		}
	}
	return w, nil
}

func TestWireRequestDecodesAsProto(t *testing.T) {
	for _, c := range wireCases {
		t.Run(c.name, func(t *testing.T) {
			b, err := proto.Marshal(c.req)
			if err != nil {
				t.Fatal(err)
			}
			w, err := fromWire(b)
			if err != nil {
				t.Fatal(err)
			}
			if fast := w.full == nil; fast != c.fast {
				t.Errorf("read by the fast path: %v, want %v", fast, c.fast)
			}
			var want wireRequest
			if err := want.fromProto(c.req); err != nil {
				t.Fatal(err)
			}
			if got, want := describeRequest(w.request()), describeRequest(want.request()); got != want {
				t.Errorf("decoded\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// describeRequest prints a request, the values behind its pointers included.
func describeRequest(r decide.Request) string {
	var b strings.Builder
	fmt.Fprintf(&b, "domain %q hits %d\n", r.Domain, r.Hits)
	for _, d := range r.Descriptors {
		var es []string
		for _, e := range d.Entries {
			es = append(es, e.Key+"="+e.Value)
		}
		fmt.Fprintf(&b, "  entries %q", es)
		if d.Hits != nil {
			fmt.Fprintf(&b, " hits %d", *d.Hits)
		}
		if d.Override != nil {
			fmt.Fprintf(&b, " override %+v", *d.Override)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// FuzzWireRequest checks that any message decodes as proto.Unmarshal
// decodes it, or fails as it does.
func FuzzWireRequest(f *testing.F) {
	for _, c := range wireCases {
		b, err := proto.Marshal(c.req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	// Fields twice, an unknown field, bad UTF-8, a truncated message.
	f.Add(protowire.AppendString(protowire.AppendTag(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "a"), 1, protowire.BytesType), "b"))
	f.Add(protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 1))
	f.Add(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "\xff"))
	f.Add([]byte{0x12, 0x05, 0x0a, 0x03})
	f.Fuzz(func(t *testing.T, b []byte) {
		var req rlsv3.RateLimitRequest
		perr := proto.Unmarshal(b, &req)
		w, err := fromWire(b)
		if perr != nil {
			if err == nil {
				t.Fatalf("proto refuses the message (%v), the fast path reads it", perr)
			}
			return
		}
		var want wireRequest
		wantErr := want.fromProto(&req)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("error %v, want %v", err, wantErr)
		}
		if err != nil {
			return
		}
		if got, want := describeRequest(w.request()), describeRequest(want.request()); got != want {
			t.Fatalf("decoded\n%s\nwant\n%s", got, want)
		}
	})
}

func TestWireRequestPooledReuse(t *testing.T) {
	// A request decoded into a wireRequest used before keeps none of
	// the earlier request.
	w := new(wireRequest)
	for _, c := range wireCases {
		b, err := proto.Marshal(c.req)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.unmarshal(b); err != nil {
			t.Fatal(err)
		}
		if w.full != nil {
			if err := w.fromProto(w.full); err != nil {
				t.Fatal(err)
			}
		}
		var want wireRequest
		if err := want.fromProto(c.req); err != nil {
			t.Fatal(err)
		}
		if got, want := describeRequest(w.request()), describeRequest(want.request()); got != want {
			t.Errorf("%s: decoded\n%s\nwant\n%s", c.name, got, want)
		}
		w.reset()
	}
}

// BenchmarkDecodeRequest is a one-descriptor request as the gRPC
// handler decodes it (wire), and as gRPC's proto codec did (proto).
func BenchmarkDecodeRequest(b *testing.B) {
	b.Run("wire", func(b *testing.B) {
		data := mem.BufferSlice{mem.SliceBuffer(marshalled(b, wireCases[0].req))}
		c := newCodec()
		b.ReportAllocs()
		for b.Loop() {
			w := wirePool.Get().(*wireRequest)
			if err := c.Unmarshal(data, w); err != nil {
				b.Fatal(err)
			}
			_ = w.request()
			w.release()
		}
	})
	b.Run("proto", func(b *testing.B) {
		data := mem.BufferSlice{mem.SliceBuffer(marshalled(b, wireCases[0].req))}
		c := newCodec()
		b.ReportAllocs()
		for b.Loop() {
			var req rlsv3.RateLimitRequest
			if err := c.Unmarshal(data, &req); err != nil {
				b.Fatal(err)
			}
			w := wirePool.Get().(*wireRequest)
			if err := w.fromProto(&req); err != nil {
				b.Fatal(err)
			}
			_ = w.request()
			w.release()
		}
	})
}

// BenchmarkMarshalResponse is a one-status response as gRPC sends it
// (serve's codec, and gRPC's proto codec).
func BenchmarkMarshalResponse(b *testing.B) {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
		Code: rlsv3.RateLimitResponse_OK, LimitRemaining: 99,
		CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{Name: "per-client", RequestsPerUnit: 100, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND},
	}}}
	for name, c := range map[string]encoding.CodecV2{"serve": newCodec(), "grpc": encoding.GetCodecV2("proto")} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				data, err := c.Marshal(resp)
				if err != nil {
					b.Fatal(err)
				}
				data.Free()
			}
		})
	}
}

func marshalled(b *testing.B, m proto.Message) []byte {
	out, err := proto.Marshal(m)
	if err != nil {
		b.Fatal(err)
	}
	return out
}

func TestHandlerGivesInterceptorsEnvoysRequest(t *testing.T) {
	s, err := New(context.Background(), Config{Rules: "testdata/edge.yaml", NoTraffic: true, NoMetrics: true})
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan any, 1)
	gs := grpc.NewServer(grpc.ForceServerCodecV2(newCodec()), grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		seen <- req
		return h(ctx, req)
	}))
	gs.RegisterService(&rlsServiceDesc, rls{s: s})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	defer func() { gs.Stop(); <-served }()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	resp, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(context.Background(), wireCases[0].req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetLimitRemaining() != 2 {
		t.Errorf("answer %v, want OK with 2 remaining", resp)
	}
	if req, ok := (<-seen).(*rlsv3.RateLimitRequest); !ok || req.GetDomain() != "edge" {
		t.Errorf("the interceptor saw %#v, want envoy's request", req)
	}
}
