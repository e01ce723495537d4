package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/redlimit/redlimit"
)

// A KeyFunc says whose limit a request counts against: a client IP, an API
// key, a user, a route. An error means the request has no key (a missing
// header, an unreadable Forwarded field): the Rule's OnKeyError says what
// then happens. KeyFuncs are called concurrently.
type KeyFunc func(r *http.Request) (string, error)

// ErrNoKey is matched (errors.Is) by the errors of this package's KeyFuncs
// when a request has no usable key.
var ErrNoKey = errors.New("httplimit: no key for the request")

func noKey(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrNoKey}, args...)...)
}

// Header keys requests by the value of the named header (an API key): the
// first value, as sent. A request without it has no key.
func Header(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		v := r.Header.Get(name)
		if v == "" {
			return "", noKey("no %s header", name)
		}
		return v, nil
	}
}

// ContextValue keys requests by a value of their context, such as the
// user an authentication middleware (run before this one) stored there:
// a string, or a fmt.Stringer. A request without it has no key.
func ContextValue(key any) KeyFunc {
	return func(r *http.Request) (string, error) {
		switch v := r.Context().Value(key).(type) {
		case string:
			if v != "" {
				return v, nil
			}
		case fmt.Stringer:
			if s := v.String(); s != "" {
				return s, nil
			}
		}
		return "", noKey("no value for %v in the request's context", key)
	}
}

// Route keys requests by method and route: "GET /items/{id}" when the
// handler is reached through an http.ServeMux pattern (Request.Pattern),
// else the method and the URL path. The pattern is known only inside the
// mux: wrap each route's handler (mux.Handle(pattern, mw.Handler(h))) to
// key by pattern; around the whole mux, Route keys by path. Combined with
// another KeyFunc (Join), it gives each route its own limit per client.
func Route() KeyFunc {
	return func(r *http.Request) (string, error) {
		p := r.Pattern
		if p == "" {
			p = r.URL.Path
		}
		if strings.HasPrefix(p, r.Method+" ") {
			return p, nil
		}
		return r.Method + " " + p, nil
	}
}

// Join keys requests by all of fns' keys together ("per client IP and
// route"). Each part is prefixed by its length, so that no two different
// lists of parts make the same key. The first error is returned.
func Join(fns ...KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		var b strings.Builder
		for i, f := range fns {
			k, err := f(r)
			if err != nil {
				return "", err
			}
			if i > 0 {
				b.WriteByte('|')
			}
			b.WriteString(strconv.Itoa(len(k)))
			b.WriteByte(':')
			b.WriteString(k)
		}
		return b.String(), nil
	}
}

// ClientIPConfig says how ClientIP finds a request's client.
type ClientIPConfig struct {
	// TrustedProxies lists the proxies in front of the server, as CIDRs
	// ("10.0.0.0/8") or addresses. Only a request whose peer is one of
	// them has its forwarding header read, and only as far back as the
	// chain of trusted proxies goes. None (the default): the peer's
	// address is the client, whatever the headers say.
	TrustedProxies []string
	// Header is the field the trusted proxies append the address they
	// received a request from to: "X-Forwarded-For" (the default) or
	// "Forwarded" (RFC 7239, its "for" parameter). Only one is read: the
	// other may come from the client and is ignored.
	Header string
	// IPv6Prefix is how many leading bits of an IPv6 client address make
	// the key: 64 by default, since one host usually holds a whole /64
	// and could otherwise take a new limit per address. 1..128.
	IPv6Prefix int
	// IPv4Prefix is the same for IPv4: 32 by default. 1..32.
	IPv4Prefix int
}

// ClientIP returns a KeyFunc keying requests by client address, as cfg
// says. The forwarding header is read right to left: each entry was
// written by the hop after it, so an entry is believed only if that hop is
// a trusted proxy, and entries a client put on the left are never reached
// unless every hop after them is trusted. The key is the address, or its
// prefix ("2001:db8:1:2::/64") when the prefix is shorter than the
// address. A request whose client cannot be read (an "unknown" or
// obfuscated Forwarded entry from a trusted proxy, a malformed entry) has
// no key. A bad cfg is an ErrInvalidArgument.
func ClientIP(cfg ClientIPConfig) (KeyFunc, error) {
	bad := func(arg, value, reason string) (KeyFunc, error) {
		return nil, &redlimit.ArgumentError{Arg: arg, Value: value, Reason: reason, Kind: redlimit.ErrInvalidArgument}
	}
	var trusted []netip.Prefix
	for _, s := range cfg.TrustedProxies {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return bad("trusted proxy", s, "must be a CIDR or an IP address")
			}
			p = netip.PrefixFrom(a.Unmap().WithZone(""), a.Unmap().BitLen())
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(0, p.Bits()-96))
		}
		trusted = append(trusted, p.Masked())
	}
	forwarded := false
	switch http.CanonicalHeaderKey(cfg.Header) {
	case "", "X-Forwarded-For":
	case "Forwarded":
		forwarded = true
	default:
		return bad("header", cfg.Header, `must be "X-Forwarded-For" or "Forwarded"`)
	}
	v6, v4 := cfg.IPv6Prefix, cfg.IPv4Prefix
	if v6 == 0 {
		v6 = 64
	}
	if v4 == 0 {
		v4 = 32
	}
	if v6 < 1 || v6 > 128 {
		return bad("IPv6 prefix", strconv.Itoa(cfg.IPv6Prefix), "must be 1..128")
	}
	if v4 < 1 || v4 > 32 {
		return bad("IPv4 prefix", strconv.Itoa(cfg.IPv4Prefix), "must be 1..32")
	}
	isTrusted := func(a netip.Addr) bool {
		for _, p := range trusted {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	return func(r *http.Request) (string, error) {
		client, err := parseHost(r.RemoteAddr)
		if err != nil {
			return "", noKey("peer address %q: %v", r.RemoteAddr, err)
		}
		if len(trusted) > 0 && isTrusted(client) {
			var hops []string
			if forwarded {
				hops, err = forwardedFor(r.Header.Values("Forwarded"))
				if err != nil {
					return "", err
				}
			} else {
				hops = xForwardedFor(r.Header.Values("X-Forwarded-For"))
			}
			for i := len(hops) - 1; i >= 0 && isTrusted(client); i-- {
				if client, err = parseHost(hops[i]); err != nil {
					return "", noKey("forwarded address %q: %v", hops[i], err)
				}
			}
		}
		bits := v4
		if client.Is6() {
			bits = v6
		}
		if bits == client.BitLen() {
			return client.String(), nil
		}
		return netip.PrefixFrom(client, bits).Masked().String(), nil
	}, nil
}

// parseHost reads an address with or without a port ("192.0.2.1",
// "192.0.2.1:80", "[2001:db8::1]:80", "2001:db8::1"), unmapped and
// without a zone.
func parseHost(s string) (netip.Addr, error) {
	s = strings.TrimSpace(s)
	a, err := netip.ParseAddr(s)
	if err != nil {
		ap, perr := netip.ParseAddrPort(s)
		if perr != nil {
			if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
				a, err = netip.ParseAddr(s[1 : len(s)-1])
			}
			if err != nil {
				return netip.Addr{}, errors.New("not an IP address")
			}
		} else {
			a = ap.Addr()
		}
	}
	return a.Unmap().WithZone(""), nil
}

// xForwardedFor splits X-Forwarded-For fields into their entries, in order.
func xForwardedFor(fields []string) []string {
	var hops []string
	for _, f := range fields {
		for e := range strings.SplitSeq(f, ",") {
			hops = append(hops, strings.TrimSpace(e))
		}
	}
	return hops
}

// forwardedFor returns the "for" parameter of every element of Forwarded
// fields (RFC 7239), in order. An element without one is an error: the
// hop it stands for cannot be told.
func forwardedFor(fields []string) ([]string, error) {
	var hops []string
	for _, f := range fields {
		for _, elem := range splitQuoted(f, ',') {
			if strings.TrimSpace(elem) == "" {
				continue
			}
			found := false
			for _, pair := range splitQuoted(elem, ';') {
				k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
				if !ok || !strings.EqualFold(k, "for") {
					continue
				}
				v, err := unquote(v)
				if err != nil {
					return nil, noKey("Forwarded element %q: %v", elem, err)
				}
				hops = append(hops, v)
				found = true
				break
			}
			if !found {
				// Kept as an entry that does not parse, so that the
				// walk stops here if it gets this far.
				hops = append(hops, "")
			}
		}
	}
	return hops, nil
}

// splitQuoted splits s at sep outside quoted strings.
func splitQuoted(s string, sep byte) []string {
	var parts []string
	quoted, escaped, start := false, false, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case escaped:
			escaped = false
		case quoted && c == '\\':
			escaped = true
		case c == '"':
			quoted = !quoted
		case !quoted && c == sep:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

// unquote reads a token or a quoted-string (RFC 9110 5.6.4).
func unquote(v string) (string, error) {
	if !strings.HasPrefix(v, `"`) {
		return v, nil
	}
	if len(v) < 2 || !strings.HasSuffix(v, `"`) {
		return "", errors.New("unterminated quoted string")
	}
	var b strings.Builder
	for i := 1; i < len(v)-1; i++ {
		if v[i] == '\\' && i+1 < len(v)-1 {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String(), nil
}
