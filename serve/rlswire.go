package serve

import (
	"context"
	"math"
	"sync"
	"unicode/utf8"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/redlimit/redlimit/serve/decide"
	"github.com/redlimit/redlimit/serve/rules"
)

// Envoy's requests are read straight from the wire into a pooled
// wireRequest (protowire, no reflection, one string for the message's
// strings) instead of a RateLimitRequest of several messages, each
// allocated, and their slices and strings. What the fast path
// does not read (limit overrides, is_negative_hits, repeated singular
// fields, unknown fields, bad UTF-8) falls back to proto.Unmarshal, so
// the answer, or the error, is the generated code's.

// rlsServiceDesc is Envoy's RateLimitService with a handler decoding
// into a wireRequest.
var rlsServiceDesc = grpc.ServiceDesc{
	ServiceName: rlsv3.RateLimitService_ServiceDesc.ServiceName,
	HandlerType: (*rlsv3.RateLimitServiceServer)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "ShouldRateLimit", Handler: shouldRateLimitHandler}},
	Metadata:    rlsv3.RateLimitService_ServiceDesc.Metadata,
}

func shouldRateLimitHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	if interceptor != nil {
		// An interceptor wants the generated request: the generated handler.
		return rlsv3.RateLimitService_ServiceDesc.Methods[0].Handler(srv, ctx, dec, interceptor)
	}
	g := srv.(rls)
	w := wirePool.Get().(*wireRequest)
	defer w.release()
	if err := dec(w); err != nil {
		return nil, err
	}
	growStack(0)
	var resp *rlsv3.RateLimitResponse
	var err error
	if w.full != nil {
		err = w.fromProto(w.full)
	}
	if err == nil {
		resp, err = g.s.decideRequest(ctx, w.request())
	}
	if err != nil {
		return nil, grpcError(err)
	}
	return resp, nil
}

var wirePool = sync.Pool{New: func() any { return new(wireRequest) }}

// maxPooled bounds the descriptors and entries a pooled wireRequest
// keeps room for: a rare large request does not pin its memory.
const maxPooled = 64

// oneStringMax is the largest message whose strings share one
// allocation: a string kept (a top key of the traffic counts) keeps
// the whole message alive, which must stay small.
const oneStringMax = 1 << 10

// wireRequest is an envoy RateLimitRequest as decide reads it.
type wireRequest struct {
	domain string
	hits   uint32
	descs  []wireDescriptor
	ents   []rules.Entry
	dds    []decide.Descriptor
	// full is the request decoded by proto, when the fast path declined.
	full *rlsv3.RateLimitRequest
}

// wireDescriptor is a descriptor's entries (ents[from:to]), hits and
// limit override.
type wireDescriptor struct {
	from, to    int
	hits        uint64
	hasHits     bool
	override    decide.Override
	hasOverride bool
}

// fromProto sets w to req.
func (w *wireRequest) fromProto(req *rlsv3.RateLimitRequest) error {
	w.domain, w.hits = req.GetDomain(), req.GetHitsAddend()
	for i, d := range req.GetDescriptors() {
		wd := wireDescriptor{from: len(w.ents)}
		for _, e := range d.GetEntries() {
			w.ents = append(w.ents, rules.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		wd.to = len(w.ents)
		if h := d.GetHitsAddend(); h != nil {
			wd.hits, wd.hasHits = h.GetValue(), true
		}
		if o := d.GetLimit(); o != nil {
			var err error
			if wd.override, err = overrideOf(i, o); err != nil {
				return err
			}
			wd.hasOverride = true
		}
		w.descs = append(w.descs, wd)
	}
	return nil
}

func (w *wireRequest) release() {
	if cap(w.descs) > maxPooled || cap(w.ents) > maxPooled {
		return
	}
	w.reset()
	wirePool.Put(w)
}

// reset empties w, keeping its room.
func (w *wireRequest) reset() {
	clear(w.ents) // the strings, for the collector
	*w = wireRequest{descs: w.descs[:0], ents: w.ents[:0], dds: w.dds[:0]}
}

// request is w as decide's Request; valid until w is released.
func (w *wireRequest) request() decide.Request {
	w.dds = w.dds[:0]
	for i := range w.descs {
		d := &w.descs[i]
		dd := decide.Descriptor{Entries: w.ents[d.from:d.to:d.to]}
		if d.hasHits {
			dd.Hits = &d.hits
		}
		if d.hasOverride {
			dd.Override = &d.override
		}
		w.dds = append(w.dds, dd)
	}
	return decide.Request{Domain: w.domain, Hits: w.hits, Descriptors: w.dds}
}

// decode reads b into w; false when the fast path declines b (w then
// holds a partial decode, to be reset).
func (w *wireRequest) decode(b []byte) bool {
	var s string // b, when small: its strings are parts of it
	if len(b) <= oneStringMax {
		s = string(b)
	}
	whole := b
	str := func(v []byte) (string, bool) {
		if !utf8.Valid(v) {
			return "", false
		}
		// v is within whole, ending where whole's capacity does.
		if off := cap(whole) - cap(v); off >= 0 && off+len(v) <= len(s) && s[off:off+len(v)] == string(v) {
			return s[off : off+len(v)], true
		}
		return string(v), true
	}
	var seenDomain, seenHits bool
	for len(b) > 0 {
		f, ok := nextField(&b)
		switch {
		case !ok:
			return false
		case f.num == 1 && f.typ == protowire.BytesType && !seenDomain:
			if w.domain, ok = str(f.bytes); !ok {
				return false
			}
			seenDomain = true
		case f.num == 2 && f.typ == protowire.BytesType:
			if !w.decodeDescriptor(f.bytes, str) {
				return false
			}
		case f.num == 3 && f.typ == protowire.VarintType && !seenHits:
			if f.varint > math.MaxUint32 {
				return false
			}
			w.hits, seenHits = uint32(f.varint), true
		default:
			return false
		}
	}
	return true
}

// wireField is one field of a message: its number and type, and its value
// (bytes or varint, the only types the fast path reads).
type wireField struct {
	num    protowire.Number
	typ    protowire.Type
	bytes  []byte
	varint uint64
}

// nextField reads the field at the start of *b and moves *b past it; false
// for a malformed field or one of another type.
func nextField(b *[]byte) (wireField, bool) {
	num, typ, n := protowire.ConsumeTag(*b)
	if n < 0 {
		return wireField{}, false
	}
	f := wireField{num: num, typ: typ}
	rest := (*b)[n:]
	switch typ {
	case protowire.BytesType:
		f.bytes, n = protowire.ConsumeBytes(rest)
	case protowire.VarintType:
		f.varint, n = protowire.ConsumeVarint(rest)
	default:
		return wireField{}, false
	}
	if n < 0 {
		return wireField{}, false
	}
	*b = rest[n:]
	return f, true
}

func (w *wireRequest) decodeDescriptor(b []byte, str func([]byte) (string, bool)) bool {
	d := wireDescriptor{from: len(w.ents)}
	for len(b) > 0 {
		f, ok := nextField(&b)
		switch {
		case !ok:
			return false
		case f.num == 1 && f.typ == protowire.BytesType:
			if !w.decodeEntry(f.bytes, str) {
				return false
			}
		case f.num == 3 && f.typ == protowire.BytesType && !d.hasHits:
			d.hasHits = true
			// google.protobuf.UInt64Value: value = 1.
			for v := f.bytes; len(v) > 0; {
				g, ok := nextField(&v)
				if !ok || g.num != 1 || g.typ != protowire.VarintType {
					return false
				}
				d.hits = g.varint
			}
		default:
			return false
		}
	}
	d.to = len(w.ents)
	w.descs = append(w.descs, d)
	return true
}

func (w *wireRequest) decodeEntry(b []byte, str func([]byte) (string, bool)) bool {
	var e rules.Entry
	var seenKey, seenValue bool
	for len(b) > 0 {
		f, ok := nextField(&b)
		if !ok || f.typ != protowire.BytesType {
			return false
		}
		ok = false
		switch {
		case f.num == 1 && !seenKey:
			e.Key, ok = str(f.bytes)
			seenKey = true
		case f.num == 2 && !seenValue:
			e.Value, ok = str(f.bytes)
			seenValue = true
		}
		if !ok {
			return false
		}
	}
	w.ents = append(w.ents, e)
	return true
}

// unmarshal decodes b into w, by the fast path or else by proto.
func (w *wireRequest) unmarshal(b []byte) error {
	if w.decode(b) {
		return nil
	}
	w.reset()
	w.full = new(rlsv3.RateLimitRequest)
	return proto.Unmarshal(b, w.full)
}

// codec is gRPC's proto codec, but for a wireRequest, which it decodes
// itself, and for replies, marshaled into pooled buffers.
type codec struct{ encoding.CodecV2 }

func newCodec() codec { return codec{encoding.GetCodecV2(protoenc.Name)} }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	w, ok := v.(*wireRequest)
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	if len(data) == 1 {
		return w.unmarshal(data[0].ReadOnlyData())
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return w.unmarshal(buf.ReadOnlyData())
}

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return c.CodecV2.Marshal(v)
	}
	// UseCachedSize: the size was just computed, and m stays unchanged.
	opts := proto.MarshalOptions{UseCachedSize: true}
	size := opts.Size(m)
	if !mem.IsBelowBufferPoolingThreshold(size) {
		return c.CodecV2.Marshal(v) // into a pooled buffer
	}
	out, err := opts.MarshalAppend(make([]byte, 0, size), m)
	if err != nil {
		return nil, err
	}
	r := &reply{data: out}
	r.slice[0] = &r.data
	return r.slice[:], nil
}

// reply is a small marshaled message as gRPC sends it, its slice of one
// buffer in one allocation (gRPC's codec makes two, besides the bytes).
type reply struct {
	data  mem.SliceBuffer
	slice [1]mem.Buffer
}
