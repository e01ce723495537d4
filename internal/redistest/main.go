package redistest

import (
	"fmt"
	"os"
)

// Runner is what a TestMain runs: *testing.M.
type Runner interface{ Run() int }

// WithServer wraps a package's tests so that a redis-server runs while they
// do, for its godoc examples, which cannot take a *testing.T to call Start:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(redistest.WithServer(m, &redisAddr)) }
//
// Run starts the server, sets *addr to its address, runs the tests and
// stops it (before goleak looks). Without redis-server, *addr is left as it
// is and the examples that use it fail, as Redis tests do.
func WithServer(m Runner, addr *string) Runner { return withServer{m, addr} }

type withServer struct {
	m    Runner
	addr *string
}

func (w withServer) Run() int {
	dir, err := os.MkdirTemp("", "redistest-examples")
	if err != nil {
		fmt.Fprintln(os.Stderr, "redistest:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	srv, err := Launch(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "redistest: no redis-server for the examples:", err)
		return w.m.Run()
	}
	defer srv.Stop()
	*w.addr = srv.Addr
	return w.m.Run()
}
