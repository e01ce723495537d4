package httplimit_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/httplimit"
)

func TestClientIP(t *testing.T) {
	proxies := []string{"10.0.0.0/8", "2001:db8:ffff::1"}
	cases := []struct {
		name   string
		cfg    httplimit.ClientIPConfig
		remote string
		header map[string][]string
		want   string
		noKey  bool
	}{
		{name: "peer", remote: "192.0.2.1:1234", want: "192.0.2.1"},
		{name: "no trusted proxies: headers ignored", remote: "192.0.2.1:1234",
			header: map[string][]string{"X-Forwarded-For": {"198.51.100.7"}}, want: "192.0.2.1"},
		{name: "untrusted peer: headers ignored", cfg: httplimit.ClientIPConfig{TrustedProxies: proxies},
			remote: "192.0.2.1:1234", header: map[string][]string{"X-Forwarded-For": {"198.51.100.7"}}, want: "192.0.2.1"},
		{name: "trusted peer", cfg: httplimit.ClientIPConfig{TrustedProxies: proxies},
			remote: "10.1.1.1:1234", header: map[string][]string{"X-Forwarded-For": {"198.51.100.7"}}, want: "198.51.100.7"},
		{name: "spoofed leftmost entry never read", cfg: httplimit.ClientIPConfig{TrustedProxies: proxies},
			remote: "10.1.1.1:1234", header: map[string][]string{"X-Forwarded-For": {"6.6.6.6, 198.51.100.7, 10.2.2.2"}}, want: "198.51.100.7"},
		{name: "several fields, in order", cfg: httplimit.ClientIPConfig{TrustedProxies: proxies},
			remote: "10.1.1.1:1234", header: map[string][]string{"X-Forwarded-For": {"6.6.6.6", "198.51.100.7:555, 10.2.2.2"}}, want: "198.51.100.7"},
		{name: "every hop trusted: leftmost", cfg: httplimit.ClientIPConfig{TrustedProxies: proxies},
			remote: "10.1.1.1:1234", header: map[string][]string{"X-Forwarded-For": {"10.3.3.3, 10.2.2.2"}}, want: "10.3.3.3"},
		{name: "garbage from a trusted hop", cfg: httplimit.ClientIPConfig{TrustedProxies: proxies},
			remote: "10.1.1.1:1234", header: map[string][]string{"X-Forwarded-For": {"1.2.3.4, garbage"}}, noKey: true},
		{name: "garbage left of the client ignored", cfg: httplimit.ClientIPConfig{TrustedProxies: proxies},
			remote: "10.1.1.1:1234", header: map[string][]string{"X-Forwarded-For": {"garbage, 198.51.100.7"}}, want: "198.51.100.7"},
		{name: "Forwarded", cfg: httplimit.ClientIPConfig{TrustedProxies: proxies, Header: "forwarded"},
			remote: "[2001:db8:ffff::1]:443", header: map[string][]string{
				"Forwarded":       {`for=6.6.6.6, for="[2001:db8:cafe:1:2::3]:4711";proto=https, for=10.0.0.9;by=10.0.0.1`},
				"X-Forwarded-For": {"7.7.7.7"}},
			want: "2001:db8:cafe:1::/64"},
		{name: "Forwarded quoted comma", cfg: httplimit.ClientIPConfig{TrustedProxies: proxies, Header: "Forwarded"},
			remote: "10.1.1.1:1", header: map[string][]string{"Forwarded": {`for=198.51.100.7;x="a,b"`}}, want: "198.51.100.7"},
		{name: "Forwarded unknown", cfg: httplimit.ClientIPConfig{TrustedProxies: proxies, Header: "Forwarded"},
			remote: "10.1.1.1:1", header: map[string][]string{"Forwarded": {"for=unknown"}}, noKey: true},
		{name: "Forwarded without for", cfg: httplimit.ClientIPConfig{TrustedProxies: proxies, Header: "Forwarded"},
			remote: "10.1.1.1:1", header: map[string][]string{"Forwarded": {"proto=https"}}, noKey: true},
		{name: "X-Forwarded-For ignored when Forwarded is read", cfg: httplimit.ClientIPConfig{TrustedProxies: proxies, Header: "Forwarded"},
			remote: "10.1.1.1:1", header: map[string][]string{"X-Forwarded-For": {"7.7.7.7"}}, want: "10.1.1.1"},
		{name: "IPv6 /64 by default", remote: "[2001:db8:1:2:3:4:5:6]:80", want: "2001:db8:1:2::/64"},
		{name: "IPv6 /128", cfg: httplimit.ClientIPConfig{IPv6Prefix: 128}, remote: "[2001:db8::6]:80", want: "2001:db8::6"},
		{name: "IPv4 /24", cfg: httplimit.ClientIPConfig{IPv4Prefix: 24}, remote: "192.0.2.77:80", want: "192.0.2.0/24"},
		{name: "4in6 peer", remote: "[::ffff:192.0.2.1]:80", want: "192.0.2.1"},
		{name: "bad peer", remote: "pipe", noKey: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key, err := httplimit.ClientIP(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = c.remote
			for k, vs := range c.header {
				for _, v := range vs {
					r.Header.Add(k, v)
				}
			}
			got, err := key(r)
			if c.noKey {
				if !errors.Is(err, httplimit.ErrNoKey) {
					t.Fatalf("got %q, %v; want ErrNoKey", got, err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

func TestClientIPConfigErrors(t *testing.T) {
	for _, cfg := range []httplimit.ClientIPConfig{
		{TrustedProxies: []string{"10.0.0.0/33"}},
		{TrustedProxies: []string{"proxy.local"}},
		{Header: "X-Real-IP"},
		{IPv6Prefix: 129},
		{IPv4Prefix: -1},
	} {
		if _, err := httplimit.ClientIP(cfg); !errors.Is(err, redlimit.ErrInvalidArgument) {
			t.Errorf("ClientIP(%+v) = %v, want ErrInvalidArgument", cfg, err)
		}
	}
}

type userKey struct{}

type user struct{ id string }

func (u user) String() string { return u.id }

func TestKeyFuncs(t *testing.T) {
	r := httptest.NewRequest("POST", "/items/7", nil)
	r.Header.Set("X-Api-Key", "k1")
	r = r.WithContext(context.WithValue(r.Context(), userKey{}, user{"alice"}))
	got := func(f httplimit.KeyFunc) string {
		t.Helper()
		k, err := f(r)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	if k := got(httplimit.Header("x-api-key")); k != "k1" {
		t.Errorf("Header = %q", k)
	}
	if k := got(httplimit.ContextValue(userKey{})); k != "alice" {
		t.Errorf("ContextValue = %q", k)
	}
	if k := got(httplimit.Route()); k != "POST /items/7" {
		t.Errorf("Route = %q", k)
	}
	r.Pattern = "POST /items/{id}"
	if k := got(httplimit.Route()); k != "POST /items/{id}" {
		t.Errorf("Route with pattern = %q", k)
	}
	r.Pattern = "/items/{id}"
	if k := got(httplimit.Route()); k != "POST /items/{id}" {
		t.Errorf("Route with a pattern without method = %q", k)
	}
	if k := got(httplimit.Join(httplimit.Header("X-Api-Key"), httplimit.Route())); k != "2:k1|16:POST /items/{id}" {
		t.Errorf("Join = %q", k)
	}
	for name, f := range map[string]httplimit.KeyFunc{
		"Header":       httplimit.Header("Authorization"),
		"ContextValue": httplimit.ContextValue("other"),
		"Join":         httplimit.Join(httplimit.Route(), httplimit.Header("Authorization")),
	} {
		if _, err := f(r); !errors.Is(err, httplimit.ErrNoKey) {
			t.Errorf("%s: %v, want ErrNoKey", name, err)
		}
	}
}

// FuzzClientIP: whatever the headers, ClientIP never panics, answers an
// address or prefix or ErrNoKey, and never reads them from an untrusted
// peer.
func FuzzClientIP(f *testing.F) {
	f.Add("10.1.1.1:80", "1.2.3.4, 10.0.0.2", `for="[2001:db8::1]:80";by=x, for=10.0.0.3`)
	f.Add("192.0.2.1:80", "garbage", `for="unterminated`)
	f.Add("[::1]:80", ",,,", `for=_hidden, ,for=unknown;;`)
	xff, err := httplimit.ClientIP(httplimit.ClientIPConfig{TrustedProxies: []string{"10.0.0.0/8", "::1"}})
	if err != nil {
		f.Fatal(err)
	}
	fwd, err := httplimit.ClientIP(httplimit.ClientIPConfig{TrustedProxies: []string{"10.0.0.0/8", "::1"}, Header: "Forwarded"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, remote, xffValue, fwdValue string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		r.Header.Set("X-Forwarded-For", xffValue)
		r.Header.Set("Forwarded", fwdValue)
		for _, key := range []httplimit.KeyFunc{xff, fwd} {
			k, err := key(r)
			if err != nil {
				if !errors.Is(err, httplimit.ErrNoKey) {
					t.Fatalf("error %v is not ErrNoKey", err)
				}
				continue
			}
			if _, perr := netip.ParseAddr(k); perr != nil {
				if _, perr := netip.ParsePrefix(k); perr != nil {
					t.Fatalf("key %q is neither an address nor a prefix", k)
				}
			}
			peer, perr := netip.ParseAddrPort(remote)
			if perr == nil && !peer.Addr().Unmap().IsLoopback() && !strings.HasPrefix(peer.Addr().Unmap().String(), "10.") {
				if want := peer.Addr().Unmap().WithZone(""); peer.Addr().Unmap().Is4() && k != want.String() {
					t.Fatalf("untrusted peer %s keyed %q", remote, k)
				}
			}
		}
	})
}
