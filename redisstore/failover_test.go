package redisstore_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
)

// waitFor polls cond (another process's state) until it holds or 30 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// shard is one shard of a Cluster as CLUSTER SHARDS lists it.
type shard struct {
	slots    []redis.SlotRange
	primary  string   // address of its primary, "" when none is online
	replicas []string // addresses of its online replicas
}

func (sh shard) serves(slot int64) bool {
	for _, r := range sh.slots {
		if r.Start <= slot && slot <= r.End {
			return true
		}
	}
	return false
}

// shards lists the Cluster's shards.
func shards(ctx context.Context, c *redis.ClusterClient) []shard {
	var out []shard
	for _, s := range c.ClusterShards(ctx).Val() {
		sh := shard{slots: s.Slots}
		for _, n := range s.Nodes {
			if n.Health != "online" {
				continue
			}
			addr := net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
			if n.Role == "master" {
				sh.primary = addr
			} else {
				sh.replicas = append(sh.replicas, addr)
			}
		}
		out = append(out, sh)
	}
	return out
}

// TestFailovers runs the load through a Sentinel failover, a Cluster
// failover and a Cluster slot migration of the limiter's hot keys.
func TestFailovers(t *testing.T) {
	ctx := context.Background()
	// A manual failover leaves the old primary up, taking writes from the
	// clients until Sentinel tells them of the new one (+switch-master),
	// and loses them when it becomes a replica of the new primary.
	// Without WithReplicaAck, its grants after the promotion are lost. With
	// it, a grant needs a replica's acknowledgement: the old primary gets
	// none once its only replica is promoted, so nothing is lost, but the
	// new primary gets one only when Sentinel converts the old primary into
	// its replica, after Sentinel's own delays (it refreshes a replica's
	// INFO every 10 s, and waits before converting an instance that still
	// says it is a primary). With a second replica, the new primary has a
	// replica at once, but the old primary's grants acknowledged by that
	// second replica, until Sentinel moves it, are lost with the rest.
	//
	// The limits' intervals are longer than Sentinel takes to tell the
	// clients, so that a grant lost then is granted again (a window of
	// 100 ms would be over before the clients switched, and hide it).
	slidingLog := redlimit.PerSecond(100)
	tokenBucket := redlimit.Config{Algorithm: redlimit.TokenBucket, Rate: 100, Interval: time.Second, Burst: 50}
	for _, v := range []struct {
		replicas int
		acks     int
		cfg      redlimit.Config
		kept     bool // no grant can be lost
	}{
		{1, 0, slidingLog, false},
		{1, 0, tokenBucket, false},
		{1, 1, slidingLog, true},
		{2, 1, slidingLog, false},
	} {
		name := fmt.Sprintf("sentinel failover, %s, %d replicas", v.cfg.Algorithm, v.replicas)
		if v.acks > 0 {
			name += fmt.Sprintf(", WithReplicaAck(%d, 200ms)", v.acks)
		}
		t.Run(name, func(t *testing.T) {
			st := redistest.StartSentinel(t, v.replicas, 3)
			var addrs []string
			for _, s := range st.Sentinels {
				addrs = append(addrs, s.Addr)
			}
			newClient := func() redis.UniversalClient {
				return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: st.Master, SentinelAddrs: addrs, MaxRetries: -1})
			}
			var opts []redisstore.Option
			if v.acks > 0 {
				opts = append(opts, redisstore.WithReplicaAck(v.acks, 200*time.Millisecond))
			}
			sc := redis.NewSentinelClient(&redis.Options{Addr: addrs[0]})
			defer sc.Close()
			before := st.Primary.Addr
			// promoted: the first time a replica said it was a primary;
			// told: when Sentinel named it (what the clients learn).
			var failedOver, promoted, told time.Time
			promotedSeen := make(chan struct{})
			// With acknowledgements the load goes on until a call made
			// once Sentinel named the new primary is granted (the new
			// primary's replica may take a while to be in sync).
			var granted func([]call) bool
			if v.acks > 0 {
				granted = func(calls []call) bool {
					return slices.ContainsFunc(calls, func(c call) bool { return c.err == nil && c.allowed && !told.IsZero() && c.start.After(told) })
				}
			}
			calls, healed := underLoadUntil(t, newClient,
				func() {
					failedOver = time.Now()
					if err := sc.Failover(ctx, st.Master).Err(); err != nil {
						t.Errorf("SENTINEL FAILOVER: %v", err)
					}
					go func() {
						defer close(promotedSeen)
						var rcs []*redis.Client
						for _, r := range st.Replicas {
							rc := redis.NewClient(&redis.Options{Addr: r.Addr})
							defer rc.Close()
							rcs = append(rcs, rc)
						}
						waitFor(t, "a replica promoted", func() bool {
							for _, rc := range rcs {
								if strings.Contains(rc.Info(ctx, "replication").Val(), "role:master") {
									promoted = time.Now()
									return true
								}
							}
							return false
						})
					}()
				},
				func() {
					var after string
					waitFor(t, "new primary", func() bool {
						a, err := sc.GetMasterAddrByName(ctx, st.Master).Result()
						if err == nil {
							after = a[0] + ":" + a[1]
						}
						return err == nil && after != before
					})
					told = time.Now()
					if v.acks > 0 {
						// Acknowledged changes need a replica in sync with
						// the new primary.
						c := redis.NewClient(&redis.Options{Addr: after})
						defer c.Close()
						waitFor(t, "a replica in sync with the new primary", func() bool {
							return strings.Contains(c.Info(ctx, "replication").Val(), "state=online")
						})
					}
				}, granted, v.cfg, opts...)
			<-promotedSeen
			report(t, fault{name: name, kept: v.kept, split: !v.kept}, calls, healed, v.cfg, loadDeadline)
			// The first grant of the new primary: of a call made once
			// Sentinel named it (with acknowledgements, the old primary,
			// without its replica, grants nothing then).
			firstGrant := time.Duration(-1)
			for _, c := range calls {
				if c.err == nil && c.allowed && c.start.After(told) && (firstGrant < 0 || c.end.Sub(promoted) < firstGrant) {
					firstGrant = c.end.Sub(promoted)
				}
			}
			grant := "-"
			if v.acks > 0 {
				grant = firstGrant.Round(time.Millisecond).String()
				if firstGrant < 0 {
					t.Errorf("no grant once Sentinel named the new primary")
				}
			}
			t.Logf("FIGURES | %s | promoted %v after SENTINEL FAILOVER | named by Sentinel %v after the promotion | first grant of the new primary %s after the promotion",
				name, promoted.Sub(failedOver).Round(time.Millisecond), told.Sub(promoted).Round(time.Millisecond), grant)
		})
	}

	cluster := redistest.StartCluster(t, 3, 1)
	var addrs []string
	for _, n := range cluster.Nodes {
		addrs = append(addrs, n.Addr)
	}
	newClient := func() redis.UniversalClient {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: -1, MaxRedirects: -1})
	}
	admin := newClient().(*redis.ClusterClient)
	defer admin.Close()
	key := "redlimit:{faults}"
	slot := admin.ClusterKeySlot(ctx, key).Val()
	nodeClient := func(addr string) *redis.Client { return redis.NewClient(&redis.Options{Addr: addr}) }
	// owner returns the address and ID of the primary serving the slot.
	owner := func() (string, string) {
		for _, sh := range shards(ctx, admin) {
			if sh.serves(slot) && sh.primary != "" {
				c := nodeClient(sh.primary)
				defer c.Close()
				return sh.primary, c.ClusterMyID(ctx).Val()
			}
		}
		t.Fatalf("no owner for slot %d", slot)
		return "", ""
	}

	t.Run("cluster failover", func(t *testing.T) {
		primary, _ := owner()
		var replica string
		waitFor(t, "the slot's primary to list its replica", func() bool {
			for _, sh := range shards(ctx, admin) {
				if sh.primary == primary && len(sh.replicas) > 0 {
					replica = sh.replicas[0]
				}
			}
			return replica != ""
		})
		rc := nodeClient(replica)
		defer rc.Close()
		calls, healed := underLoad(t, newClient,
			func() {
				if err := rc.ClusterFailover(ctx).Err(); err != nil {
					t.Errorf("CLUSTER FAILOVER: %v", err)
				}
			},
			func() {
				waitFor(t, "replica promoted", func() bool {
					return strings.Contains(rc.Info(ctx, "replication").Val(), "role:master")
				})
			}, loadConfig)
		report(t, fault{name: "Cluster manual failover", kept: true}, calls, healed, loadConfig, loadDeadline)
	})

	t.Run("cluster slot migration", func(t *testing.T) {
		fromAddr, fromID := owner()
		var toAddr, toID string
		for _, sh := range shards(ctx, admin) {
			if a := sh.primary; a != "" && a != fromAddr && len(sh.slots) > 0 {
				c := nodeClient(a)
				toAddr, toID = a, c.ClusterMyID(ctx).Val()
				c.Close()
				break
			}
		}
		from, to := nodeClient(fromAddr), nodeClient(toAddr)
		defer from.Close()
		defer to.Close()
		host, port := strings.Split(toAddr, ":")[0], strings.Split(toAddr, ":")[1]
		moved := 0
		calls, healed := underLoad(t, newClient,
			func() {
				must := func(err error) {
					if err != nil {
						t.Errorf("migrating: %v", err)
					}
				}
				must(to.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID).Err())
				must(from.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID).Err())
				for {
					keys := from.ClusterGetKeysInSlot(ctx, int(slot), 100).Val()
					if len(keys) == 0 {
						break
					}
					args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
					for _, k := range keys {
						args = append(args, k)
					}
					must(from.Do(ctx, args...).Err())
					moved += len(keys)
				}
				for _, n := range cluster.Nodes {
					c := nodeClient(n.Addr)
					if strings.Contains(c.Info(ctx, "replication").Val(), "role:master") {
						must(c.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err())
					}
					c.Close()
				}
			},
			func() {}, loadConfig)
		t.Logf("moved %d keys of slot %d from %s to %s", moved, slot, fromAddr, toAddr)
		report(t, fault{name: "Cluster slot migration of the hot keys", kept: true}, calls, healed, loadConfig, loadDeadline)
	})
}
