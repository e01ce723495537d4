package redisstore

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"
)

// A PerClient client's keys hold a string (its state) and a list (its
// sliding log), each with a TTL. A key of another type there was written
// by something else: every call of that client fails with ErrCorrupt, and
// without a TTL it would for good. SetConfig with SetResetState and Delete
// remove such keys, found with SCAN on the node that serves the limiter
// (a walk over that node's keys, in steps that never block Redis; on a
// node with millions of keys it takes that many steps' round trips). It
// needs SCAN and TYPE; an ACL that forbids them skips it.

// globEscaper escapes what SCAN's MATCH would read as a pattern.
var globEscaper = strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)

// clearForeignIn runs clearForeign within ctx; an ACL without SCAN or
// TYPE makes it a no-op.
func (s *Store) clearForeignIn(ctx context.Context, name string) error {
	_, err := within(s, ctx, func(ctx context.Context) (int, error) { return s.clearForeign(ctx, name) })
	if redis.IsPermissionError(err) {
		return nil
	}
	return err
}

// clearForeign deletes the keys of name's clients that do not hold what
// redlimit writes there, and reports how many it deleted.
func (s *Store) clearForeign(ctx context.Context, name string) (int, error) {
	k := limiterKeys(s.prefix, name)
	var node redis.Cmdable = s.rdb
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		n, err := cc.MasterForKey(ctx, k.limiter)
		if err != nil {
			return 0, err
		}
		node = n
	}
	deleted := 0
	for _, kind := range [...]struct{ suffix, want string }{{"client:", "string"}, {"log:", "list"}} {
		pattern := globEscaper.Replace(k.base+kind.suffix) + "*"
		var cursor uint64
		for {
			found, next, err := node.Scan(ctx, cursor, pattern, 1000).Result()
			if err != nil {
				return deleted, err
			}
			if len(found) > 0 {
				n, err := deleteForeign(ctx, node, found, kind.want)
				deleted += n
				if err != nil {
					return deleted, err
				}
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	return deleted, nil
}

// deleteForeign deletes those of keys whose type is not want.
func deleteForeign(ctx context.Context, node redis.Cmdable, keys []string, want string) (int, error) {
	types := make([]*redis.StatusCmd, len(keys))
	if _, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, key := range keys {
			types[i] = p.Type(ctx, key)
		}
		return nil
	}); err != nil {
		return 0, err
	}
	var foreign []string
	for i, t := range types {
		if typ := t.Val(); typ != want && typ != "none" {
			foreign = append(foreign, keys[i])
		}
	}
	if len(foreign) == 0 {
		return 0, nil
	}
	// One DEL per key: on a Cluster, keys that share a hash tag may still
	// be refused together while their slot migrates.
	_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, key := range foreign {
			p.Del(ctx, key)
		}
		return nil
	})
	return len(foreign), err
}
