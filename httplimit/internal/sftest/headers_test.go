package sftest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/clock"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/memstore"
)

// quota is one list member of RateLimit-Policy or RateLimit, parsed.
type quota struct {
	params map[string]any
}

// parse reads a field as a structured-field List of String items, as
// draft-ietf-httpapi-ratelimit-headers-11 defines both fields.
func parse(t *testing.T, h http.Header, field string) map[string]quota {
	t.Helper()
	list, err := httpsfv.UnmarshalList(h.Values(field))
	if err != nil {
		t.Fatalf("%s %q: %v", field, h.Values(field), err)
	}
	out := map[string]quota{}
	for _, m := range list {
		it, ok := m.(httpsfv.Item)
		if !ok {
			t.Fatalf("%s: member %#v is not an Item", field, m)
		}
		name, ok := it.Value.(string)
		if !ok {
			t.Fatalf("%s: item %#v is not a String", field, it.Value)
		}
		q := quota{params: map[string]any{}}
		for _, k := range it.Params.Names() {
			q.params[k], _ = it.Params.Get(k)
		}
		out[name] = q
	}
	return out
}

func (q quota) int(t *testing.T, name string) int64 {
	t.Helper()
	v, ok := q.params[name].(int64)
	if !ok {
		t.Fatalf("parameter %s = %#v, want an Integer", name, q.params[name])
	}
	return v
}

func ceilSeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

func TestHeadersParse(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	store := memstore.New(memstore.WithTimeSource(clk))
	ip, err := redlimit.NewPolicy(store, "ip", []redlimit.Config{redlimit.PerMinute(10)}, redlimit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	key, err := redlimit.NewPolicy(store, "key", []redlimit.Config{
		redlimit.PerSecond(2),
		redlimit.TokenBucketConfig(5, time.Minute, 3),
	}, redlimit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	ipKey, err := httplimit.ClientIP(httplimit.ClientIPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httplimit.New([]httplimit.Rule{
		{Policy: ip, Key: ipKey},
		{Policy: key, Key: httplimit.Header("X-Api-Key")},
	}, httplimit.WithPartitionKey())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	defer srv.Close()

	request := func(apiKey string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.Header.Set("X-Api-Key", apiKey)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	// check holds both fields to the policies' own state for the keys.
	check := func(resp *http.Response, apiKey string) {
		t.Helper()
		pol, rl := parse(t, resp.Header, "RateLimit-Policy"), parse(t, resp.Header, "RateLimit")
		want := map[string]redlimit.LimitStatus{}
		for _, pk := range []struct {
			p        *redlimit.Policy
			key      string
			multiple bool
		}{{ip, "127.0.0.1", false}, {key, apiKey, true}} {
			st, err := pk.p.Key(pk.key).Status(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range st.Limits {
				name := pk.p.Name()
				if pk.multiple {
					name += ":" + l.Name
				}
				want[name] = l
			}
		}
		if len(pol) != len(want) || len(rl) != len(want) {
			t.Fatalf("quotas %v / %v, want %d", pol, rl, len(want))
		}
		for name, l := range want {
			p, r := pol[name], rl[name]
			if q := p.int(t, "q"); q != l.Config.Rate {
				t.Errorf("%s: q=%d, want %d", name, q, l.Config.Rate)
			}
			if w := p.int(t, "w"); w != ceilSeconds(l.Config.Interval) {
				t.Errorf("%s: w=%d, want %v", name, w, l.Config.Interval)
			}
			// On a refusal, the quotas of the rules that granted show
			// what they had left before handing the permit back.
			if rem := r.int(t, "r"); rem != l.Remaining && (resp.StatusCode == 200 || rem != l.Remaining-1 || !strings.HasPrefix(name, "ip")) {
				t.Errorf("%s: r=%d, want %d", name, rem, l.Remaining)
			}
			if reset := r.int(t, "t"); reset != ceilSeconds(max(l.ResetAfter, l.RetryAfter)) && resp.StatusCode == 200 {
				t.Errorf("%s: t=%d, want %v", name, reset, l.ResetAfter)
			}
			pk1, ok1 := p.params["pk"].([]byte)
			pk2, ok2 := r.params["pk"].([]byte)
			if !ok1 || !ok2 || !bytes.Equal(pk1, pk2) || len(pk1) == 0 || bytes.Contains(pk1, []byte(apiKey)) {
				t.Errorf("%s: pk %#v / %#v", name, p.params["pk"], r.params["pk"])
			}
		}
	}

	for i := range 2 {
		resp := request("k1")
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d", i+1, resp.StatusCode)
		}
		check(resp, "k1")
		clk.Advance(300 * time.Millisecond)
	}
	resp := request("k1")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third request: %d", resp.StatusCode)
	}
	check(resp, "k1")
	ra, err := httpsfv.UnmarshalItem(resp.Header.Values("Retry-After"))
	if err != nil {
		t.Fatal(err)
	}
	secs, ok := ra.Value.(int64)
	if !ok || secs != 1 {
		t.Fatalf("Retry-After %#v, want 1 (0.4 s rounded up)", ra.Value)
	}
	clk.Advance(time.Duration(secs) * time.Second)
	if resp := request("k1"); resp.StatusCode != 200 {
		t.Fatalf("after Retry-After: %d", resp.StatusCode)
	}

	// Another key has its own partition.
	other := request("k2")
	a, _ := httpsfv.UnmarshalList(resp.Header.Values("RateLimit"))
	b, _ := httpsfv.UnmarshalList(other.Header.Values("RateLimit"))
	pkOf := func(l httpsfv.List, i int) []byte {
		v, _ := l[i].(httpsfv.Item).Params.Get("pk")
		b, _ := v.([]byte)
		return b
	}
	if !bytes.Equal(pkOf(a, 0), pkOf(b, 0)) || bytes.Equal(pkOf(a, 1), pkOf(b, 1)) {
		t.Errorf("pk: same IP must share, different API keys must not: %v %v", a, b)
	}
}
