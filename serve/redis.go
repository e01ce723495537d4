package serve

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/redisstore"
)

// ErrNoPolicyStore: the Redis store of this build keeps no keyed
// policies (redlimit.PolicyStore), which the service needs.
var ErrNoPolicyStore = errors.New("serve: this build's Redis store has no keyed policies (redlimit.PolicyStore)")

// openRedis opens the store at url (redisstore.OpenURL's forms) and
// returns it with a ping for /readyz and a function that closes it.
func openRedis(url string) (redlimit.PolicyStore, func(context.Context) error, func(), error) {
	rdb, err := redisstore.OpenURL(url)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("serve: %w", err)
	}
	st, err := redisstore.New(rdb)
	if err != nil {
		rdb.Close()
		return nil, nil, nil, fmt.Errorf("serve: %w", err)
	}
	ps, ok := any(st).(redlimit.PolicyStore)
	if !ok {
		rdb.Close()
		return nil, nil, nil, ErrNoPolicyStore
	}
	ping := func(ctx context.Context) error { return rdb.Ping(ctx).Err() }
	closeAll := func() {
		if c, ok := any(st).(io.Closer); ok {
			c.Close()
		}
		rdb.Close()
	}
	return ps, ping, closeAll, nil
}
