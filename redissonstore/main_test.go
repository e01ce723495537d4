package redissonstore_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/redlimit/redlimit/internal/redistest"
)

// redisAddr is the Redis the examples use: TestMain starts one for them.
var redisAddr = "localhost:6379"

func TestMain(m *testing.M) { goleak.VerifyTestMain(redistest.WithServer(m, &redisAddr)) }
