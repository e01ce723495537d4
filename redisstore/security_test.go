package redisstore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
)

// MinimalACL is the ACL the README documents for a limiter user: its key
// prefix, the script and function commands and, since scripts' calls are
// checked too, the commands the scripts run. Nothing else.
const MinimalACL = "on >limiter-pw resetkeys ~redlimit:* resetchannels -@all " +
	"+evalsha +eval +fcall +function|load +multi +exec +exists +del +pexpire +persist +hello +ping " +
	"+hget +hmget +hset +hdel +get +set +lrange +ltrim +lset +lrem +rpush +llen +time +scan +type"

// exercise runs every store call once under each algorithm and returns the
// first error.
func exercise(ctx context.Context, s redlimit.Store) error {
	for _, alg := range redlimit.Algorithms {
		l, err := redlimit.New(s, "acl-"+string(alg))
		if err != nil {
			return err
		}
		if err := l.SetRate(ctx, redlimit.PerInterval(2, time.Minute).WithAlgorithm(alg)); err != nil {
			return err
		}
		if err := l.SetRate(ctx, redlimit.PerInterval(2, time.Minute).WithAlgorithm(alg), redlimit.ResetState()); err != nil {
			return err
		}
		if _, err := l.TryAcquire(ctx, 1); err != nil {
			return err
		}
		if _, err := l.Release(ctx, 1); err != nil {
			return err
		}
		if _, err := l.AvailablePermits(ctx); err != nil {
			return err
		}
		if _, err := l.Config(ctx); err != nil {
			return err
		}
		if _, err := l.Expire(ctx, time.Hour); err != nil {
			return err
		}
		if _, err := l.ClearExpire(ctx); err != nil {
			return err
		}
		if _, err := l.Delete(ctx); err != nil {
			return err
		}
	}
	return nil
}

// deadlined runs f with a 3 s deadline; a call that does not return at all
// (a hang, the failure this guards against) fails the test after 30 s.
func deadlined(t *testing.T, f func(ctx context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("the call ignored its deadline")
		return nil
	}
}

func TestPasswordAndACL(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "admin-pw")
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: "admin-pw"})
	defer admin.Close()
	ctx := context.Background()
	if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", "limiter"}, splitACL(MinimalACL)...)...).Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", "scripts-only"}, splitACL(strings.Replace(MinimalACL, "+fcall +function|load ", "", 1))...)...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", "no-scripts"}, splitACL(strings.Replace(MinimalACL, "+evalsha +eval +fcall +function|load ", "", 1))...)...).Err(); err != nil {
		t.Fatal(err)
	}
	fcalls := func() int64 {
		for _, line := range strings.Split(admin.Info(ctx, "commandstats").Val(), "\r\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_fcall:calls="); ok {
				n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
				return n
			}
		}
		return 0
	}
	open := func(user, pw string, opts ...redisstore.Option) redlimit.Store {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: user, Password: pw, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		s, err := redisstore.New(c, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if err := deadlined(t, func(ctx context.Context) error { return exercise(ctx, open("default", "admin-pw")) }); err != nil {
		t.Fatalf("with the password: %v", err)
	}
	if err := deadlined(t, func(ctx context.Context) error { return exercise(ctx, open("limiter", "limiter-pw")) }); err != nil {
		t.Fatalf("with the minimal ACL: %v", err)
	}
	// Without SCAN and TYPE (the minimal ACL of earlier versions), Delete
	// and SetRate(ResetState) still work; only the clean-up of clients'
	// foreign keys is skipped.
	if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", "no-scan"}, splitACL(strings.Replace(MinimalACL, " +scan +type", "", 1))...)...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := deadlined(t, func(ctx context.Context) error { return exercise(ctx, open("no-scan", "limiter-pw")) }); err != nil {
		t.Fatalf("with the minimal ACL without SCAN and TYPE: %v", err)
	}
	// The minimal ACL lets the store load and call its function; without
	// those two commands it runs the same Lua as a script.
	if fcalls() == 0 {
		t.Error("with the minimal ACL the limiter function was never called")
	}
	before := fcalls()
	if err := deadlined(t, func(ctx context.Context) error { return exercise(ctx, open("scripts-only", "limiter-pw")) }); err != nil {
		t.Fatalf("without FCALL and FUNCTION LOAD: %v", err)
	}
	if fcalls() != before {
		t.Error("a user without FCALL made function calls")
	}
	denied := map[string]redlimit.Store{
		"wrong password":        open("default", "nope"),
		"no password":           open("", ""),
		"a key outside the ACL": open("limiter", "limiter-pw", redisstore.WithPrefix("other:")),
		"no script commands":    open("no-scripts", "limiter-pw"),
	}
	for what, s := range denied {
		err := deadlined(t, func(ctx context.Context) error { return exercise(ctx, s) })
		if !errors.Is(err, redlimit.ErrDenied) {
			t.Errorf("%s: %v; want ErrDenied", what, err)
		}
		if strings.Contains(err.Error(), "limiter-pw") || strings.Contains(err.Error(), "admin-pw") {
			t.Errorf("%s: the error shows a password: %v", what, err)
		}
	}
}

func splitACL(s string) []any {
	var out []any
	for _, f := range strings.Fields(s) {
		out = append(out, f)
	}
	return out
}

func TestTLS(t *testing.T) {
	certs := redistest.MakeCerts(t)
	other := redistest.MakeCerts(t)
	_, addr := redistest.StartTLS(t, certs, false)
	_, mutualAddr := redistest.StartTLS(t, certs, true)
	store := func(addr string, o *redis.Options) redlimit.Store {
		o.Addr, o.MaxRetries = addr, -1
		c := redis.NewClient(o)
		t.Cleanup(func() { c.Close() })
		s, _ := redisstore.New(c)
		return s
	}
	ok := map[string]redlimit.Store{
		"TLS":        store(addr, &redis.Options{TLSConfig: certs.ClientTLS(false)}),
		"mutual TLS": store(mutualAddr, &redis.Options{TLSConfig: certs.ClientTLS(true)}),
	}
	for what, s := range ok {
		if err := deadlined(t, func(ctx context.Context) error { return exercise(ctx, s) }); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	bad := map[string]redlimit.Store{
		"wrong CA":                 store(addr, &redis.Options{TLSConfig: other.ClientTLS(false)}),
		"no client certificate":    store(mutualAddr, &redis.Options{TLSConfig: certs.ClientTLS(false)}),
		"plain client on TLS port": store(addr, &redis.Options{ReadTimeout: time.Second}),
	}
	for what, s := range bad {
		err := deadlined(t, func(ctx context.Context) error { return exercise(ctx, s) })
		if !errors.Is(err, redlimit.ErrUnavailable) {
			t.Errorf("%s: %v; want ErrUnavailable", what, err)
		}
	}
}
