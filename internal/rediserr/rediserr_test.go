package rediserr_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/rediserr"
	"github.com/redlimit/redlimit/internal/redistest"
)

// TestWrap maps errors a real Redis returns: each gets its kind, keeps its
// cause, and reads as Redis's message without the script location.
func TestWrap(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	rdb.Set(ctx, "str", "x", 0)
	rdb.Do(ctx, "ACL", "SETUSER", "limited", "on", ">pw", "~*", "+@all", "-hget")
	limited := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "limited", Password: "pw"})
	defer limited.Close()
	wrongPass := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "limited", Password: "nope", MaxRetries: -1})
	defer wrongPass.Close()
	refused := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1})
	defer refused.Close()

	hget := "return redis.call('HGET', KEYS[1], 'c')"
	cases := []struct {
		what string
		err  error
		kind error
		msg  string // the whole message, or a prefix ending in "..."
	}{
		{"WRONGTYPE in a script", rdb.Eval(ctx, hget, []string{"str"}).Err(), redlimit.ErrCorrupt,
			"redlimit: stored data unreadable: WRONGTYPE Operation against a key holding the wrong kind of value"},
		{"WRONGTYPE outside a script", rdb.HGet(ctx, "str", "c").Err(), redlimit.ErrCorrupt,
			"redlimit: stored data unreadable: WRONGTYPE Operation against a key holding the wrong kind of value"},
		{"a Lua error in a script", rdb.Eval(ctx, "return 1 < {}", nil).Err(), redlimit.ErrCorrupt,
			"redlimit: stored data unreadable: ERR attempt to compare..."},
		{"NOPERM in a script", limited.Eval(ctx, hget, []string{"str"}).Err(), redlimit.ErrDenied,
			"redlimit: store denied access: ERR The user executing the script can't run this command or subcommand"},
		{"NOPERM", limited.HGet(ctx, "str", "c").Err(), redlimit.ErrDenied,
			"redlimit: store denied access: NOPERM..."},
		{"WRONGPASS", wrongPass.Ping(ctx).Err(), redlimit.ErrDenied,
			"redlimit: store denied access: WRONGPASS..."},
		{"refused connection", refused.Ping(ctx).Err(), redlimit.ErrUnavailable,
			"redlimit: store unavailable: dial tcp 127.0.0.1:1: connect: connection refused"},
		{"a deadline", context.DeadlineExceeded, redlimit.ErrUnavailable,
			"redlimit: store unavailable: context deadline exceeded"},
		{"already mapped", fmt.Errorf("%w: 0 of 1 replicas confirmed", redlimit.ErrUnavailable), redlimit.ErrUnavailable,
			"redlimit: store unavailable: 0 of 1 replicas confirmed"},
	}
	for _, c := range cases {
		if c.err == nil {
			t.Errorf("%s: Redis returned no error", c.what)
			continue
		}
		err := rediserr.Wrap(c.err)
		if !errors.Is(err, c.kind) {
			t.Errorf("%s: %v; want %v", c.what, err, c.kind)
		}
		if !errors.Is(err, c.err) {
			t.Errorf("%s: %v lost its cause %v", c.what, err, c.err)
		}
		got := err.Error()
		if want, ok := strings.CutSuffix(c.msg, "..."); ok && !strings.HasPrefix(got, want) || !ok && got != c.msg {
			t.Errorf("%s: message %q; want %q", c.what, got, c.msg)
		}
		if strings.Contains(got, "user_script") || strings.Count(got, "redlimit:") != 1 {
			t.Errorf("%s: message %q keeps the script's location or a second kind", c.what, got)
		}
	}
	var rerr redis.Error
	if !errors.As(rediserr.Wrap(rdb.HGet(ctx, "str", "c").Err()), &rerr) {
		t.Errorf("the Redis error is not reachable with errors.As")
	}
	if rediserr.Wrap(nil) != nil {
		t.Errorf("Wrap(nil) is not nil")
	}
}
