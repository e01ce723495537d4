package httplimit_test

import (
	"testing"

	"go.uber.org/goleak"
)

// go-redis redials a failed connection in the background and notices its
// client was closed only after its next sleep: not a leak of ours.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}
