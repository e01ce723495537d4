package serve_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/redlimit/redlimit/serve"
)

// Without a shared Redis (Config.RedisClient) the registry holds this
// instance alone; with one, every instance serving on it.
func ExampleServer_Instances() {
	srv, err := serve.New(context.Background(), serve.Config{
		Rules:  "rules/testdata/envoy/edge_proxy_per_ip.yaml",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	list, err := srv.Instances(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(len(list), list[0].ID == srv.ID(), list[0].RulesVersion == srv.RulesVersion(), list[0].TTL)
	// Output: 1 true true 15s
}
