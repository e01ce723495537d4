package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redisstore"
)

// TestErrorMessages: errors read as one redlimit kind and Redis's own
// words, without the script's location, and keep their cause.
func TestErrorMessages(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	s := newStore(t, rdb)
	l, _ := redlimit.New(s, "corrupt", redlimit.WithConfig(redlimit.PerSecond(10)))
	rdb.Set(ctx, s.Prefix()+"{corrupt}", "x", 0)
	const wrongType = "redlimit: stored data unreadable: WRONGTYPE Operation against a key holding the wrong kind of value"
	_, err := l.Config(ctx)
	var rerr redis.Error
	if err == nil || err.Error() != wrongType || !errors.Is(err, redlimit.ErrCorrupt) || !errors.As(err, &rerr) {
		t.Errorf("Config: %v; want %q, ErrCorrupt and the Redis error", err, wrongType)
	}
	if err := l.SetRate(ctx, redlimit.PerSecond(5)); err == nil || err.Error() != wrongType || !errors.Is(err, redlimit.ErrCorrupt) {
		t.Errorf("SetRate: %v; want %q", err, wrongType)
	}

	// No replica to confirm: "store unavailable" once, with the reason.
	acked, err := redisstore.New(rdb, redisstore.WithReplicaAck(1, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	la, _ := redlimit.New(acked, "acked", redlimit.WithConfig(redlimit.PerSecond(10)))
	const unconfirmed = "redlimit: store unavailable: 0 of 1 replicas confirmed the change within 10ms"
	if _, err := la.TryAcquire(ctx, 1); err == nil || err.Error() != unconfirmed || !errors.Is(err, redlimit.ErrUnavailable) {
		t.Errorf("TryAcquire without a replica: %v; want %q", err, unconfirmed)
	}
}
