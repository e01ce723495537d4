package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// server is a redis-server the benchmark started for itself, on a free
// loopback port, with no persistence. (internal/redistest does the same for
// tests, but it takes a testing.TB.)
type server struct {
	addr    string
	dir     string
	version string // "redis-server --version"
	cmd     *exec.Cmd
	exited  chan error
}

// startServer starts redis-server; the caller stops it.
func startServer(ctx context.Context) (*server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found on PATH (install it, or pass --redis URL): %w", err)
	}
	dir, err := os.MkdirTemp("", "redlimit-bench-")
	if err != nil {
		return nil, err
	}
	version, _ := exec.CommandContext(ctx, bin, "--version").Output()
	var lastErr error
	for try := 0; try < 5; try++ {
		port, err := freePort()
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		s := &server{addr: fmt.Sprintf("127.0.0.1:%d", port), dir: dir, version: strings.TrimSpace(string(version))}
		s.cmd = exec.Command(bin,
			"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--dir", dir,
			"--save", "", "--appendonly", "no", "--protected-mode", "no",
			"--logfile", filepath.Join(dir, "redis.log"))
		if lastErr = s.start(ctx); lastErr == nil {
			return s, nil
		}
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("starting redis-server: %w", lastErr)
}

func (s *server) start(ctx context.Context) error {
	if err := s.cmd.Start(); err != nil {
		return err
	}
	s.exited = make(chan error, 1)
	go func() { s.exited <- s.cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		select {
		case err := <-s.exited:
			s.exited = nil
			return fmt.Errorf("redis-server exited at start (%v): %s", err, s.logTail())
		default:
		}
		if c, err := net.DialTimeout("tcp", s.addr, 100*time.Millisecond); err == nil {
			fmt.Fprint(c, "PING\r\n")
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "+PONG") {
				return nil
			}
		}
		time.Sleep(10 * time.Millisecond) // readiness poll of another process
	}
	s.kill()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("redis-server did not answer PING within 10s: %s", s.logTail())
}

func (s *server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}

func (s *server) kill() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
	}
	if s.exited != nil {
		<-s.exited
		s.exited = nil
	}
}

// stop kills the server, waits for it and removes its directory.
func (s *server) stop() {
	s.kill()
	os.RemoveAll(s.dir)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// infoField reads one field of INFO section.
func infoField(ctx context.Context, rdb *redis.Client, section, field string) (string, error) {
	info, err := rdb.Info(ctx, section).Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("INFO %s has no %s", section, field)
}

// redisCPU is the CPU time the Redis process has used, user and system, in
// seconds (INFO cpu).
func redisCPU(ctx context.Context, rdb *redis.Client) (float64, error) {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	found := 0
	for _, line := range strings.Split(info, "\r\n") {
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, f); ok {
				x, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return 0, fmt.Errorf("INFO cpu: %s%s: %w", f, v, err)
				}
				total += x
				found++
			}
		}
	}
	if found != 2 {
		return 0, fmt.Errorf("INFO cpu has no used_cpu_sys and used_cpu_user")
	}
	return total, nil
}

// memoryUsage sums MEMORY USAGE (every element counted: SAMPLES 0) of keys;
// a missing key counts 0.
func memoryUsage(ctx context.Context, rdb *redis.Client, keys []string) (int64, error) {
	var total int64
	for _, k := range keys {
		n, err := rdb.MemoryUsage(ctx, k, 0).Result()
		if err == redis.Nil {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("MEMORY USAGE %s: %w", k, err)
		}
		total += n
	}
	return total, nil
}
