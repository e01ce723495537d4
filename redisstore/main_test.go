package redisstore_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/redlimit/redlimit/internal/redistest"
)

// redisAddr is the Redis the examples use: TestMain starts one for them.
var redisAddr = "localhost:6379"

// go-redis redials a failed connection in the background and notices its
// client was closed only after its next sleep: not a leak of ours.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(redistest.WithServer(m, &redisAddr), goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}
