package serve

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/redisstore"
)

// openRedis opens the store at url (redisstore.OpenURL's forms) and
// returns it with its client, a ping for /readyz and a function that
// closes both.
func openRedis(url string) (redlimit.PolicyStore, redis.UniversalClient, func(context.Context) error, func(), error) {
	rdb, err := redisstore.OpenURL(url)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("serve: %w", err)
	}
	st, err := redisstore.New(rdb)
	if err != nil {
		rdb.Close()
		return nil, nil, nil, nil, fmt.Errorf("serve: %w", err)
	}
	ping := func(ctx context.Context) error { return rdb.Ping(ctx).Err() }
	closeAll := func() {
		st.Close() // its policy subscription, before the client
		rdb.Close()
	}
	return st, rdb, ping, closeAll, nil
}
