package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// server is a redis-server the benchmark started for itself, on a free
// loopback port, with no persistence (internal/redistest.Launch).
type server struct {
	*redistest.Server
	version string // "redis-server --version"
}

// startServer starts redis-server; the caller stops it.
func startServer(ctx context.Context) (*server, error) {
	dir, err := os.MkdirTemp("", "redlimit-bench-")
	if err != nil {
		return nil, err
	}
	srv, err := redistest.Launch(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w (or pass --redis URL)", err)
	}
	version, _ := exec.CommandContext(ctx, "redis-server", "--version").Output()
	return &server{Server: srv, version: strings.TrimSpace(string(version))}, nil
}

// stop kills the server, waits for it and removes its directory.
func (s *server) stop() {
	s.Stop()
	os.RemoveAll(s.Dir)
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

// redisCounters reads, in one INFO, the CPU time the Redis process has
// used, user and system, in seconds, and the calls of every command
// (commandstats; commands that scripts and functions run count too), INFO
// itself left out.
func redisCounters(ctx context.Context, rdb *redis.Client) (float64, map[string]uint64, error) {
	info, err := rdb.Info(ctx, "cpu", "commandstats").Result()
	if err != nil {
		return 0, nil, err
	}
	return parseCounters(info)
}

// parseCounters reads redisCounters' figures from INFO's text.
func parseCounters(info string) (float64, map[string]uint64, error) {
	var total float64
	found := 0
	cmds := map[string]uint64{}
	for _, line := range strings.Split(info, "\r\n") {
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, f); ok {
				x, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return 0, nil, fmt.Errorf("INFO cpu: %s%s: %w", f, v, err)
				}
				total += x
				found++
			}
		}
		// cmdstat_evalsha:calls=12,usec=...
		if rest, ok := strings.CutPrefix(line, "cmdstat_"); ok {
			name, fields, _ := strings.Cut(rest, ":")
			if name == "info" {
				continue
			}
			for _, kv := range strings.Split(fields, ",") {
				if v, ok := strings.CutPrefix(kv, "calls="); ok {
					n, err := strconv.ParseUint(v, 10, 64)
					if err != nil {
						return 0, nil, fmt.Errorf("INFO commandstats: %s: %w", line, err)
					}
					cmds[name] = n
				}
			}
		}
	}
	if found != 2 {
		return 0, nil, fmt.Errorf("INFO cpu has no used_cpu_sys and used_cpu_user")
	}
	return total, cmds, nil
}

// memoryUsage sums MEMORY USAGE (every element counted: SAMPLES 0) of keys;
// a missing key counts 0.
func memoryUsage(ctx context.Context, rdb redis.Cmdable, keys []string) (int64, error) {
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
