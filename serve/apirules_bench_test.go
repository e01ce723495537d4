package serve_test

import (
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
	"github.com/redlimit/redlimit/serve"
)

// BenchmarkAPIRulePropagation is one PUT on instance A per op, until
// instance B (on the same real Redis) has the new rules in force: the
// time a change takes to reach another instance through the
// announcement (the periodic check is set far off).
func BenchmarkAPIRulePropagation(b *testing.B) {
	rs := redistest.Start(b)
	file := filepath.Join(b.TempDir(), "rules.yaml")
	replace(b, file, apiRulesFile)
	instance := func() *testServer {
		rdb := rs.Client(b)
		store, err := redisstore.New(rdb)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { store.Close() })
		return start(b, serve.Config{Rules: file, Store: store, RedisClient: rdb, Tokens: testTokens, RulesPoll: time.Hour,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}
	a, bb := instance(), instance()
	waitSubscribers(b, rs, 2)
	url := "http://" + a.httpAddr + "/v1/rules/edge/remote_address"
	b.ResetTimer()
	for i := range b.N {
		req, _ := http.NewRequest("PUT", url, strings.NewReader(`{"limits":[{"rate":`+strconv.Itoa(i+1)+`,"interval":"1h"}]}`))
		req.Header.Set("Authorization", "Bearer "+aliceToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("PUT: %d", resp.StatusCode)
		}
		want, deadline := a.srv.RulesVersion(), time.Now().Add(30*time.Second)
		for bb.srv.RulesVersion() != want {
			if time.Now().After(deadline) {
				b.Fatal("the change never reached B")
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
}
