package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel is a primary, its replicas and the sentinels watching them.
type Sentinel struct {
	Master    string // the name sentinels know the primary by
	Primary   *Server
	Replicas  []*Server
	Sentinels []*Server
}

// StartSentinel starts a primary with replicas replicas and sentinels
// sentinels (quorum: a majority), all on free loopback ports, stopped at
// cleanup.
func StartSentinel(t testing.TB, replicas, sentinels int) *Sentinel {
	t.Helper()
	bin := Binary(t)
	s := &Sentinel{Master: "redlimit-test"}
	s.Primary = Start(t)
	host, pport, err := net.SplitHostPort(s.Primary.Addr)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < replicas; i++ {
		s.Replicas = append(s.Replicas, Start(t, "--replicaof", host, pport))
	}
	quorum := sentinels/2 + 1
	for i := 0; i < sentinels; i++ {
		dir := t.TempDir()
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s %s %s %d\n"+
			"sentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 5000\nsentinel parallel-syncs %s 1\n",
			port, dir, s.Master, host, pport, quorum, s.Master, s.Master, s.Master)
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		srv := &Server{Addr: fmt.Sprintf("127.0.0.1:%d", port), Dir: dir, args: []string{conf, "--sentinel", "--logfile", filepath.Join(dir, "redis-sentinel.log")}}
		if err := srv.start(bin); err != nil {
			t.Fatalf("starting sentinel: %v", err)
		}
		t.Cleanup(srv.Stop)
		s.Sentinels = append(s.Sentinels, srv)
	}
	// Wait until the replicas are in sync and every sentinel knows them.
	pc := redis.NewClient(&redis.Options{Addr: s.Primary.Addr})
	defer pc.Close()
	online := time.Now().Add(30 * time.Second)
	for strings.Count(pc.Info(context.Background(), "replication").Val(), "state=online") < replicas {
		if time.Now().After(online) {
			t.Fatalf("replicas not in sync after 30s: %s", pc.Info(context.Background(), "replication").Val())
		}
		time.Sleep(20 * time.Millisecond) // polling another process's state
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, sn := range s.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr})
		for {
			reps, err := sc.Replicas(context.Background(), s.Master).Result()
			if err == nil && len(reps) >= replicas {
				break
			}
			if time.Now().After(deadline) {
				sc.Close()
				t.Fatalf("sentinel %s does not see the replicas: %v", sn.Addr, err)
			}
			time.Sleep(50 * time.Millisecond) // polling another process's state
		}
		sc.Close()
	}
	return s
}

// Client returns a failover client that finds the primary through the
// sentinels, closed at cleanup. It never retries a command, as the stores
// require.
func (s *Sentinel) Client(t testing.TB) *redis.Client {
	t.Helper()
	var addrs []string
	for _, sn := range s.Sentinels {
		addrs = append(addrs, sn.Addr)
	}
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.Master, SentinelAddrs: addrs, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("failover client ping: %v", err)
	}
	return c
}
