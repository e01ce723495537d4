// Package redistest starts real redis-server processes for tests, on free
// loopback ports, and stops them when the test ends. A missing redis-server
// fails the test: Redis tests never skip.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one running redis-server.
type Server struct {
	Addr   string
	Dir    string
	cmd    *exec.Cmd
	args   []string
	exited chan error
}

// Binary returns the path of redis-server, failing t if there is none.
func Binary(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found on PATH: the Redis tests need it (apt-get install redis-server): %v", err)
	}
	return p
}

// Start runs a redis-server with no persistence on a free loopback port, with
// extra config directives ("--name value" pairs), and stops it at cleanup.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	Binary(t)
	s, err := Launch(t.TempDir(), extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Launch is Start for programs that are not tests (the benchmark): it runs
// redis-server with its files in dir and leaves stopping it to the caller.
func Launch(dir string, extra ...string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found on PATH (apt-get install redis-server): %w", err)
	}
	var lastErr error
	for try := 0; try < 5; try++ {
		port, err := freePort()
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		s := &Server{Addr: fmt.Sprintf("127.0.0.1:%d", port), Dir: dir}
		s.args = append([]string{
			"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--dir", dir,
			"--save", "", "--appendonly", "no", "--protected-mode", "no",
			"--repl-diskless-sync-delay", "0",
			"--logfile", filepath.Join(dir, fmt.Sprintf("redis-%d.log", port)),
		}, extra...)
		if lastErr = s.start(bin); lastErr == nil {
			return s, nil
		}
	}
	return nil, fmt.Errorf("starting redis-server: %w", lastErr)
}

func (s *Server) start(bin string) error {
	s.cmd = exec.Command(bin, s.args...)
	if err := s.cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- s.cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("redis-server exited at start (%v): %s", err, s.logTail())
		default:
		}
		c, err := net.DialTimeout("tcp", s.Addr, 100*time.Millisecond)
		if err == nil {
			fmt.Fprint(c, "PING\r\n")
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "+PONG") || strings.HasPrefix(line, "-NOAUTH") {
				s.exited = exited
				return nil
			}
		}
		time.Sleep(10 * time.Millisecond) // readiness poll of a separate process
	}
	_ = s.cmd.Process.Kill()
	return fmt.Errorf("redis-server did not answer PING within 10s: %s", s.logTail())
}

func (s *Server) logTail() string {
	matches, _ := filepath.Glob(filepath.Join(s.Dir, "redis-*.log"))
	var out []string
	for _, m := range matches {
		b, _ := os.ReadFile(m)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) > 5 {
			lines = lines[len(lines)-5:]
		}
		out = append(out, lines...)
	}
	return strings.Join(out, " | ")
}

// Stop kills the server and waits for it to exit.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	if s.exited != nil {
		<-s.exited
		s.exited = nil
	}
}

// Client returns a go-redis client for the server, closed at cleanup. It
// never retries a command, as the stores require.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("ping %s: %v", s.Addr, err)
	}
	return c
}

// URL returns a redis:// URL for the server.
func (s *Server) URL() string { return "redis://" + s.Addr }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Kill stops the server with SIGKILL, as a crash would.
func (s *Server) Kill() { s.Stop() }

// Restart starts a stopped server again with the same arguments and port
// (with no persistence, empty).
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.start(Binary(t)); err != nil {
		t.Fatalf("restarting redis-server: %v", err)
	}
}

// Pause stops the server's process (SIGSTOP): it holds its connections
// and answers nothing until Resume.
func (s *Server) Pause() { _ = s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { _ = s.cmd.Process.Signal(syscall.SIGCONT) }
