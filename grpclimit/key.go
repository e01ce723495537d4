package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/redlimit/redlimit"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// KeyFunc derives the key a rule charges a call to: a client's address, an
// API key, a method, or a combination (Join, First). An error means the
// call has no such key; the rule's OnKeyError says what then happens.
type KeyFunc func(ctx context.Context, fullMethod string) (string, error)

// ErrNoKey is wrapped by every error of this package's key functions: the
// call carries no usable key of that kind.
var ErrNoKey = errors.New("grpclimit: no key")

// maxKeyLen is redlimit's longest key: longer ones are key errors here, so
// that OnKeyError decides rather than the store.
const maxKeyLen = 1024

// PeerIP keys a call by its peer's IP address: an IPv4 address whole, an
// IPv6 address by its /64 prefix, since one client commonly holds a whole
// /64 and would otherwise get a fresh limit per address. PeerIPPrefix
// chooses the prefixes. A peer that is no IP (a Unix socket) is ErrNoKey.
func PeerIP() KeyFunc {
	f, _ := PeerIPPrefix(32, 64)
	return f
}

// PeerIPPrefix is PeerIP grouping IPv4 addresses by their first v4 bits
// (1..32) and IPv6 ones by their first v6 bits (1..128). IPv4-mapped IPv6
// addresses count as IPv4. Bits out of range are an ErrInvalidArgument.
func PeerIPPrefix(v4, v6 int) (KeyFunc, error) {
	if v4 < 1 || v4 > 32 {
		return nil, &redlimit.ArgumentError{Arg: "v4", Value: strconv.Itoa(v4), Reason: "must be 1..32", Kind: redlimit.ErrInvalidArgument}
	}
	if v6 < 1 || v6 > 128 {
		return nil, &redlimit.ArgumentError{Arg: "v6", Value: strconv.Itoa(v6), Reason: "must be 1..128", Kind: redlimit.ErrInvalidArgument}
	}
	return func(ctx context.Context, _ string) (string, error) {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return "", fmt.Errorf("%w: the call has no peer", ErrNoKey)
		}
		ip, err := peerAddr(p.Addr)
		if err != nil {
			return "", err
		}
		return group(ip, v4, v6), nil
	}, nil
}

// group is ip's key: the address, or its prefix of v4 or v6 bits.
func group(ip netip.Addr, v4, v6 int) string {
	bits := v6
	if ip.Is4() {
		bits = v4
	}
	if bits == ip.BitLen() {
		return ip.String()
	}
	pfx, _ := ip.Prefix(bits) // bits is in range for ip's family
	return pfx.String()
}

// ForwardedIP keys a call by the client's IP address as proxies in front
// of the server report it in the "x-forwarded-for" metadata (Envoy and
// most gRPC proxies set it), grouped as PeerIP groups. It trusts the
// header only from peers inside trusted, and reads it right to left,
// skipping trusted proxies: the first address no trusted proxy vouches
// for is the client's, so a client cannot choose its key by sending a
// forged leftmost entry. A call from an untrusted peer is keyed by the
// peer's address; an entry that is no IP address, where the client's
// should be, is ErrNoKey.
func ForwardedIP(trusted ...netip.Prefix) KeyFunc {
	ts := append([]netip.Prefix(nil), trusted...)
	isTrusted := func(ip netip.Addr) bool {
		for _, p := range ts {
			if p.Contains(ip) {
				return true
			}
		}
		return false
	}
	return func(ctx context.Context, _ string) (string, error) {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return "", fmt.Errorf("%w: the call has no peer", ErrNoKey)
		}
		ip, err := peerAddr(p.Addr)
		if err != nil {
			return "", err
		}
		if !isTrusted(ip) {
			return group(ip, 32, 64), nil
		}
		md, _ := metadata.FromIncomingContext(ctx)
		var hops []string
		for _, v := range md.Get("x-forwarded-for") {
			hops = append(hops, strings.Split(v, ",")...)
		}
		for i := len(hops) - 1; i >= 0; i-- {
			h := strings.TrimSpace(hops[i])
			hip, err := netip.ParseAddr(h)
			if err != nil {
				return "", fmt.Errorf("%w: x-forwarded-for entry %q is no IP address", ErrNoKey, h)
			}
			ip = hip.Unmap().WithZone("")
			if !isTrusted(ip) {
				break
			}
		}
		return group(ip, 32, 64), nil
	}
}

// peerAddr reads the IP of a peer address, without its zone.
func peerAddr(a net.Addr) (netip.Addr, error) {
	var ip netip.Addr
	switch a := a.(type) {
	case *net.TCPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	default:
		ap, err := netip.ParseAddrPort(a.String())
		if err != nil {
			return netip.Addr{}, fmt.Errorf("%w: peer %s %q is no IP address", ErrNoKey, a.Network(), a.String())
		}
		ip = ap.Addr()
	}
	if !ip.IsValid() {
		return netip.Addr{}, fmt.Errorf("%w: peer %q is no IP address", ErrNoKey, a.String())
	}
	return ip.Unmap().WithZone(""), nil
}

// Metadata keys a call by the first value of the incoming metadata entry
// name (an API key, a tenant): missing or empty is ErrNoKey. The client
// chooses this value, so a rule keyed by it alone limits honest clients;
// pair it with an authenticating interceptor that runs first, or with a
// PeerIP rule.
func Metadata(name string) KeyFunc {
	return metadataKey(name, "", metadata.FromIncomingContext)
}

// OutgoingMetadata is Metadata for a client's interceptors: it reads the
// metadata the call sends.
func OutgoingMetadata(name string) KeyFunc {
	return metadataKey(name, "outgoing ", metadata.FromOutgoingContext)
}

// metadataKey keys a call by the first value of the metadata entry name
// that from finds; which says which metadata it is in errors.
func metadataKey(name, which string, from func(context.Context) (metadata.MD, bool)) KeyFunc {
	name = strings.ToLower(name)
	return func(ctx context.Context, _ string) (string, error) {
		md, _ := from(ctx)
		v := md.Get(name)
		if len(v) == 0 || v[0] == "" {
			return "", fmt.Errorf("%w: no %s%q metadata", ErrNoKey, which, name)
		}
		return v[0], nil
	}
}

// Static keys every call by key: one limit for all the calls a rule
// applies to (a client's whole traffic, a server's capacity).
func Static(key string) KeyFunc {
	return func(context.Context, string) (string, error) { return key, nil }
}

// FullMethod keys a call by its method, "/package.Service/Method": a limit
// shared by every caller of a method.
func FullMethod() KeyFunc {
	return func(_ context.Context, fullMethod string) (string, error) {
		if fullMethod == "" {
			return "", fmt.Errorf("%w: the call names no method", ErrNoKey)
		}
		return fullMethod, nil
	}
}

// Join keys a call by every key fns give, together (per API key and
// method, say): each part is quoted, so that no two different lists of
// parts make the same key. Any part's error is the key's.
func Join(fns ...KeyFunc) KeyFunc {
	return func(ctx context.Context, fullMethod string) (string, error) {
		var b strings.Builder
		for i, f := range fns {
			k, err := f(ctx, fullMethod)
			if err != nil {
				return "", err
			}
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Quote(k))
		}
		return b.String(), nil
	}
}

// First keys a call by the first of fns that gives a key (the API key, or
// else the peer's address): a fallback. With none, the error joins each
// one's.
func First(fns ...KeyFunc) KeyFunc {
	return func(ctx context.Context, fullMethod string) (string, error) {
		errs := make([]error, 0, len(fns))
		for _, f := range fns {
			k, err := f(ctx, fullMethod)
			if err == nil {
				return k, nil
			}
			errs = append(errs, err)
		}
		if len(errs) == 0 {
			return "", fmt.Errorf("%w: no key function given", ErrNoKey)
		}
		return "", errors.Join(errs...)
	}
}
