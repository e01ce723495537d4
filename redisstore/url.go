package redisstore

import (
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
)

// OpenURL returns a go-redis client for a URL naming one server, a Sentinel
// set or a Cluster:
//
//	redis://[user:pass@]host:port[/db][?options]          one server (rediss:// for TLS)
//	redis+sentinel://host:port?master_name=NAME&addr=...   sentinels watching NAME
//	redis+cluster://host:port?addr=host2:port2&addr=...    cluster nodes to start from
//
// The options are go-redis's (ParseURL, ParseFailoverURL, ParseClusterURL);
// rediss+sentinel and rediss+cluster use TLS. The client honours context
// deadlines and never retries a command (a retried script might grant twice):
// a Cluster client has MaxRedirects -1 too, the store following MOVED and ASK.
// The caller closes the client.
func OpenURL(url string) (redis.UniversalClient, error) {
	scheme, rest, ok := strings.Cut(url, "://")
	if !ok {
		return nil, badURL(url, "no scheme")
	}
	base, topology, _ := strings.Cut(scheme, "+")
	if base != "redis" && base != "rediss" {
		return nil, badURL(url, "scheme must be redis or rediss, optionally +sentinel or +cluster")
	}
	plain := base + "://" + rest
	switch topology {
	case "":
		o, err := redis.ParseURL(plain)
		if err != nil {
			return nil, badURL(url, err.Error())
		}
		o.ContextTimeoutEnabled, o.MaxRetries = true, -1
		return redis.NewClient(o), nil
	case "sentinel":
		o, err := redis.ParseFailoverURL(plain)
		if err != nil {
			return nil, badURL(url, err.Error())
		}
		if o.MasterName == "" {
			return nil, badURL(url, "a sentinel URL needs ?master_name=NAME")
		}
		o.ContextTimeoutEnabled, o.MaxRetries = true, -1
		return redis.NewFailoverClient(o), nil
	case "cluster":
		o, err := redis.ParseClusterURL(plain)
		if err != nil {
			return nil, badURL(url, err.Error())
		}
		o.ContextTimeoutEnabled, o.MaxRetries, o.MaxRedirects = true, -1, -1
		return redis.NewClusterClient(o), nil
	}
	return nil, badURL(url, "unknown topology "+topology)
}

// badURL reports a bad URL without echoing it: it may hold a password.
func badURL(url, why string) error {
	scheme, rest, _ := strings.Cut(url, "://")
	if rest != "" {
		why = strings.ReplaceAll(why, rest, "...")
	}
	return &redlimit.ArgumentError{Arg: "redis URL", Value: scheme + "://...", Reason: fmt.Sprint(why), Kind: redlimit.ErrInvalidArgument}
}
