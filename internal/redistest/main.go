package redistest

import (
	"fmt"
	"net"
	"os"
	"sync"
)

// Runner is what a TestMain runs: *testing.M.
type Runner interface{ Run() int }

// WithServer wraps a package's tests so that a redis-server runs while they
// do, for its godoc examples, which cannot take a *testing.T to call Start:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(redistest.WithServer(m, &redisAddr)) }
//
// Run starts the server, sets *addr to its address, runs the tests and
// stops it (before goleak looks). Without redis-server the examples that
// use it fail, as Redis tests do: *addr is then a loopback port that
// closes every connection at once, never *addr's own default, which could
// be a developer's Redis that the examples would write to.
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
		closed, cerr := listenClosing()
		if cerr != nil {
			fmt.Fprintln(os.Stderr, "redistest:", cerr)
			return 1
		}
		defer closed.stop()
		*w.addr = closed.addr
		return w.m.Run()
	}
	defer srv.Stop()
	*w.addr = srv.Addr
	return w.m.Run()
}

// closingListener accepts loopback connections and closes each at once.
type closingListener struct {
	addr string
	ln   net.Listener
	wg   sync.WaitGroup
}

func listenClosing() (*closingListener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &closingListener{addr: ln.Addr().String(), ln: ln}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return // closed by stop
			}
			_ = conn.Close()
		}
	}()
	return c, nil
}

// stop closes the listener and waits for its goroutine.
func (c *closingListener) stop() {
	_ = c.ln.Close()
	c.wg.Wait()
}
