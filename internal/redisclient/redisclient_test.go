package redisclient

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
)

// TestCheck: go-redis's defaults retry on a single client, a failover
// client and a ring; -1 turns that off; a cluster client resends within its
// MaxRedirects (default 3), so it needs -1 there too. No server is needed:
// the options decide.
func TestCheck(t *testing.T) {
	cases := []struct {
		name   string
		client redis.UniversalClient
		unsafe bool
	}{
		{"client default", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), true},
		{"client 0", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: 0}), true},
		{"client 2", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: 2}), true},
		{"client -1", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1}), false},
		{"failover default", redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}}), true},
		{"failover -1", redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}, MaxRetries: -1}), false},
		{"universal default", redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:1"}}), true},
		{"universal -1", redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:1"}, MaxRetries: -1}), false},
		{"cluster default", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}), true},
		{"cluster retries -1", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, MaxRetries: -1}), true},
		{"cluster redirects 0", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, MaxRetries: -1, MaxRedirects: 0}), true},
		{"cluster redirects 2", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, MaxRetries: -1, MaxRedirects: 2}), true},
		{"cluster -1 -1", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, MaxRetries: -1, MaxRedirects: -1}), false},
		{"cluster 3", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, MaxRetries: 3, MaxRedirects: -1}), true},
		{"universal cluster default", redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}, MaxRetries: -1}), true},
		{"universal cluster -1 -1", redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}, MaxRetries: -1, MaxRedirects: -1}), false},
		{"ring default", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}}), true},
		{"ring -1", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, MaxRetries: -1}), false},
	}
	for _, tc := range cases {
		err := Check(tc.client, "AllowRetries()")
		_ = tc.client.Close()
		if !tc.unsafe {
			if err != nil {
				t.Errorf("%s: %v; want accepted", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrUnsafe) || !errors.Is(err, redlimit.ErrInvalidArgument) {
			t.Errorf("%s: %v; want ErrUnsafe and ErrInvalidArgument", tc.name, err)
		}
	}
}
