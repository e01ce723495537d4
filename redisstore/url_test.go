package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
)

// TestOpenURL opens each topology by URL and shares a limit through it.
func TestOpenURL(t *testing.T) {
	single := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, 1, 3)
	cluster := redistest.StartCluster(t, 3, 0)
	var clusterAddrs []string
	for _, n := range cluster.Nodes[1:] {
		clusterAddrs = append(clusterAddrs, "addr="+n.Addr)
	}
	urls := map[string]string{
		"single":   single.URL() + "/0",
		"sentinel": "redis+sentinel://" + sentinel.Sentinels[0].Addr + "?master_name=" + sentinel.Master + "&addr=" + sentinel.Sentinels[1].Addr,
		"cluster":  "redis+cluster://" + cluster.Nodes[0].Addr + "?" + strings.Join(clusterAddrs, "&"),
	}
	for name, url := range urls {
		rdb, err := redisstore.OpenURL(url)
		if err != nil {
			t.Fatalf("%s: OpenURL: %v", name, err)
		}
		s, err := redisstore.New(rdb) // no retries: accepted as built
		if err != nil {
			t.Fatalf("%s: New on OpenURL's client: %v", name, err)
		}
		l, _ := redlimit.New(s, "url-"+name, redlimit.WithConfig(redlimit.PerInterval(1, time.Hour)))
		r1, err1 := l.TryAcquire(context.Background(), 1)
		r2, err2 := l.TryAcquire(context.Background(), 1)
		rdb.Close()
		if err1 != nil || err2 != nil || !r1.Allowed || r2.Allowed {
			t.Fatalf("%s: %+v %v, %+v %v", name, r1, err1, r2, err2)
		}
	}
	for _, bad := range []string{"localhost:6379", "http://x", "redis+mesh://x", "redis+sentinel://127.0.0.1:1", "redis://:secret@host:notaport"} {
		_, err := redisstore.OpenURL(bad)
		if !errors.Is(err, redlimit.ErrInvalidArgument) || strings.Contains(err.Error(), "secret") {
			t.Errorf("OpenURL(%q) = %v; want ErrInvalidArgument without the password", bad, err)
		}
	}
}
