package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a running Redis Cluster.
type Cluster struct {
	Nodes []*Server
}

// StartCluster starts a Redis Cluster of primaries (each with replicas
// replicas) on free loopback ports, created with redis-cli --cluster create,
// and stops it at cleanup.
func StartCluster(t testing.TB, primaries, replicas int) *Cluster {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli not found on PATH: the Cluster tests need it (apt-get install redis-tools): %v", err)
	}
	c := &Cluster{}
	var addrs []string
	for i := 0; i < primaries*(1+replicas); i++ {
		s := Start(t, "--cluster-enabled", "yes", "--cluster-config-file", fmt.Sprintf("nodes-%d.conf", i), "--cluster-node-timeout", "2000")
		c.Nodes = append(c.Nodes, s)
		addrs = append(addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", fmt.Sprint(replicas), "--cluster-yes")
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	// Wait until every node agrees the cluster is up: a bounded poll.
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range c.Nodes {
		rdb := redis.NewClient(&redis.Options{Addr: n.Addr})
		for {
			info, err := rdb.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				rdb.Close()
				t.Fatalf("cluster not ok after 30s: %v %s", err, info)
			}
			time.Sleep(20 * time.Millisecond)
		}
		rdb.Close()
	}
	return c
}

// Client returns a cluster client that resends nothing (as the stores
// require), closed at cleanup.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	var addrs []string
	for _, n := range c.Nodes {
		addrs = append(addrs, n.Addr)
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: -1, MaxRedirects: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rdb.ForEachShard(ctx, func(ctx context.Context, s *redis.Client) error { return s.Ping(ctx).Err() }); err != nil {
		t.Fatalf("cluster ping: %v", err)
	}
	return rdb
}
