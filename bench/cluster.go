package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// clusterPrimaries is the size of the Cluster the cluster cells measure.
const clusterPrimaries = 3

// cluster is a Redis Cluster the benchmark started for itself: primaries
// without replicas, each on a free loopback port with no persistence, the
// slots split evenly between them.
type cluster struct {
	dir   string
	nodes []*redistest.Server
	// addrs are the primaries' addresses, in the order of the per-node
	// figures; admins are one plain client per node (INFO, SCAN).
	addrs  []string
	admins []*redis.Client
	// admin routes by key (MEMORY USAGE).
	admin *redis.ClusterClient
}

// startCluster starts a Cluster of n primaries: n redis-servers with
// cluster-enabled, slots assigned with CLUSTER ADDSLOTSRANGE, joined with
// CLUSTER MEET, then waits until every node sees the others and says the
// Cluster is ok. The caller stops it.
func startCluster(ctx context.Context, n int) (_ *cluster, err error) {
	dir, err := os.MkdirTemp("", "redlimit-bench-cluster-")
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	for i := range n {
		sub := filepath.Join(dir, strconv.Itoa(i))
		if err := os.Mkdir(sub, 0o755); err != nil {
			return nil, err
		}
		s, err := redistest.Launch(sub, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000")
		if err != nil {
			return nil, fmt.Errorf("starting a Cluster node: %w", err)
		}
		c.nodes = append(c.nodes, s)
		c.addrs = append(c.addrs, s.Addr)
		c.admins = append(c.admins, redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1}))
	}
	for i, a := range c.admins {
		lo, hi := i*16384/n, (i+1)*16384/n-1
		if err := a.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return nil, fmt.Errorf("CLUSTER ADDSLOTSRANGE %d %d on %s: %w", lo, hi, c.addrs[i], err)
		}
	}
	for _, addr := range c.addrs[1:] {
		host, port, _ := net.SplitHostPort(addr)
		if err := c.admins[0].ClusterMeet(ctx, host, port).Err(); err != nil {
			return nil, fmt.Errorf("CLUSTER MEET %s: %w", addr, err)
		}
	}
	if err := c.waitOK(ctx, n); err != nil {
		return nil, err
	}
	c.admin = redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.addrs, MaxRetries: -1, MaxRedirects: -1})
	return c, nil
}

// waitOK polls every node (a separate process: no event to wait on) until
// it knows n nodes and its state is ok, for at most 30 s.
func (c *cluster) waitOK(ctx context.Context, n int) error {
	deadline := time.Now().Add(30 * time.Second)
	want := "cluster_known_nodes:" + strconv.Itoa(n)
	for i, a := range c.admins {
		for {
			info, err := a.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, want) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the Cluster is not ok after 30s (node %s: %v %q)", c.addrs[i], err, info)
			}
			select {
			case <-time.After(50 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

// client is a ClusterClient with the options every system shares (see
// env.client): a pool of one connection per caller (per node), no retries
// nor redirects followed (a resent script could grant twice), context
// deadlines honoured.
func (c *cluster) client(callers int) *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: c.addrs, PoolSize: callers, MaxRetries: -1, MaxRedirects: -1, ContextTimeoutEnabled: true,
	})
}

// stop closes the clients, kills the nodes and removes their files.
func (c *cluster) stop() {
	if c.admin != nil {
		c.admin.Close()
	}
	for _, a := range c.admins {
		a.Close()
	}
	for _, s := range c.nodes {
		s.Stop()
	}
	os.RemoveAll(c.dir)
}

// describe is the Cluster for the report's settings.
func (c *cluster) describe() string {
	return fmt.Sprintf("%d primaries, no replicas, slots split evenly, on loopback (%s)", len(c.addrs), strings.Join(c.addrs, ", "))
}

// nodeCounters are one node's counters at one end of a window (see
// redisCounters).
type nodeCounters struct {
	addr string
	cpu  float64
	cmds map[string]uint64
}

// counters reads every node's CPU and command counters; ok is false if
// one could not be read.
func (c *cluster) counters(ctx context.Context) ([]nodeCounters, bool) {
	out := make([]nodeCounters, len(c.admins))
	for i, a := range c.admins {
		cpu, cmds, err := redisCounters(ctx, a)
		if err != nil {
			return nil, false
		}
		out[i] = nodeCounters{addr: c.addrs[i], cpu: cpu, cmds: cmds}
	}
	return out, true
}

// scriptCommands are the commands that run a script or a function: a
// "run" of redlimit (FCALL) or of a peer (EVALSHA).
var scriptCommands = []string{"fcall", "fcall_ro", "evalsha", "evalsha_ro", "eval", "eval_ro"}

// runsOf is how many script or function runs cmds counts.
func runsOf(cmds map[string]float64) float64 {
	var n float64
	for name, v := range cmds {
		if slices.Contains(scriptCommands, name) {
			n += v
		}
	}
	return n
}

// expiring is the number of keys with a time to live on every node.
func (c *cluster) expiring(ctx context.Context) (int64, error) {
	var total int64
	for _, a := range c.admins {
		n, err := expiringIn(ctx, a, 0)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// scan walks the keys under prefix on every node (SCAN deletes the expired
// keys it meets).
func (c *cluster) scan(ctx context.Context, prefix string) error {
	var errs []error
	for _, a := range c.admins {
		iter := a.Scan(ctx, 0, prefix+"*", 5000).Iterator()
		for iter.Next(ctx) {
		}
		errs = append(errs, iter.Err())
	}
	return errors.Join(errs...)
}
