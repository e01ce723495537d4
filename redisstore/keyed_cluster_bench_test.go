package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
)

// BenchmarkKeyedCluster measures keyed decisions (a token bucket Policy,
// always granted) over 100,000 keys on a Cluster of three primaries, at 8
// and 64 concurrent callers: beside ns/op, the primaries' Redis CPU per
// decision (INFO cpu, summed), their FCALLs per decision (INFO
// commandstats) and their reads per decision (INFO stats
// total_reads_processed: the round trips they served), and the store's
// keyed runs per decision (Stats).
func BenchmarkKeyedCluster(b *testing.B) {
	cluster := redistest.StartCluster(b, 3, 0)
	var addrs []string
	for _, n := range cluster.Nodes {
		addrs = append(addrs, n.Addr)
	}
	for _, callers := range []int{8, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, PoolSize: callers, MaxRetries: -1, MaxRedirects: -1})
			defer rdb.Close()
			s, err := redisstore.New(rdb)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			p, err := redlimit.NewPolicy(s, "bench-cluster", []redlimit.Config{redlimit.TokenBucketConfig(1<<30, time.Second, 1<<30)})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			keys := make([]string, keyedBenchKeys)
			for i := range keys {
				keys[i] = "user-" + strconv.Itoa(i)
			}
			for _, k := range keys[:64] { // the library on every primary
				if _, err := p.Key(k).TryAcquire(ctx, 1); err != nil {
					b.Fatal(err)
				}
			}
			before, st0 := clusterCounters(b, rdb), s.Stats()
			driveKeyed(ctx, b, p, keys, callers)
			after, st := clusterCounters(b, rdb), s.Stats()
			n := float64(b.N)
			b.ReportMetric(n/b.Elapsed().Seconds(), "decisions/s")
			b.ReportMetric((after.cpu-before.cpu)/n*1e6, "redis-µs/decision")
			b.ReportMetric(float64(after.fcalls-before.fcalls)/n, "fcalls/decision")
			b.ReportMetric(float64(after.reads-before.reads)/n, "reads/decision")
			b.ReportMetric(float64(st.KeyRuns-st0.KeyRuns)/n, "runs/decision")
		})
	}
}

// clusterTotals are counters summed over a Cluster's primaries.
type clusterTotals struct {
	cpu           float64
	fcalls, reads int64
}

func clusterCounters(b *testing.B, rdb *redis.ClusterClient) clusterTotals {
	var mu sync.Mutex
	var t clusterTotals
	err := rdb.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "cpu", "stats", "commandstats").Result()
		if err != nil {
			return err
		}
		var cpu float64
		var fcalls, reads int64
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "used_cpu_sys:"); ok {
				x, _ := strconv.ParseFloat(v, 64)
				cpu += x
			} else if v, ok := strings.CutPrefix(line, "used_cpu_user:"); ok {
				x, _ := strconv.ParseFloat(v, 64)
				cpu += x
			} else if v, ok := strings.CutPrefix(line, "total_reads_processed:"); ok {
				reads, _ = strconv.ParseInt(v, 10, 64)
			} else if v, ok := strings.CutPrefix(line, "cmdstat_fcall:calls="); ok {
				fcalls, _ = strconv.ParseInt(v[:strings.IndexByte(v, ',')], 10, 64)
			}
		}
		mu.Lock()
		t.cpu += cpu
		t.fcalls += fcalls
		t.reads += reads
		mu.Unlock()
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return t
}
