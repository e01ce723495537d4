package main

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// The benchmark shares its machine with whatever else runs there. To tell a
// disturbed cell, it measures the CPU time that neither it nor its Redis
// used during the window: the machine's busy time (/proc/stat: user, nice,
// system, steal) less its own (/proc/self/stat) and Redis's (INFO cpu), in
// CPUs. Linux only; elsewhere the figure is absent and no cell is retried.

// clockTicks is USER_HZ, the unit of /proc/stat and /proc/self/stat: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// snapshot is the counters at one end of a measured window: CPU time used
// so far in seconds, Redis's commands, this process's allocations, and the
// machine's load average.
type snapshot struct {
	redis     float64           // Redis's CPU, user + system (INFO cpu)
	redisCmds map[string]uint64 // calls per command (INFO commandstats), INFO itself left out
	redisOK   bool
	nodes     []nodeCounters // onCluster: each node's (redis and redisCmds are their sums)
	busy      float64        // the whole machine (/proc/stat)
	self      float64        // this process (/proc/self/stat)
	procOK    bool
	rusage    float64 // this process, user + system (getrusage)
	rusageOK  bool
	mallocs   uint64  // runtime.MemStats.Mallocs
	load1     float64 // /proc/loadavg, the one-minute average
	loadOK    bool
}

// snap reads the counters; Redis's when the benchmark uses one: for store
// onCluster, every node's of the Cluster.
func (e *env) snap(ctx context.Context, store string) snapshot {
	var s snapshot
	if store == onCluster && e.cluster != nil {
		if nodes, ok := e.cluster.counters(ctx); ok {
			s.nodes, s.redisCmds, s.redisOK = nodes, map[string]uint64{}, true
			for _, n := range nodes {
				s.redis += n.cpu
				for name, v := range n.cmds {
					s.redisCmds[name] += v
				}
			}
		}
	} else if e.admin != nil {
		if cpu, cmds, err := redisCounters(ctx, e.admin); err == nil {
			s.redis, s.redisCmds, s.redisOK = cpu, cmds, true
		}
	}
	busy, ok1 := machineBusy()
	self, ok2 := selfCPU()
	s.busy, s.self, s.procOK = busy, self, ok1 && ok2
	s.rusage, s.rusageOK = processCPU()
	s.load1, s.loadOK = loadAverage()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s.mallocs = ms.Mallocs
	return s
}

// loadAverage is the machine's one-minute load average (/proc/loadavg):
// runnable and uninterruptible tasks, averaged.
func loadAverage() (float64, bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return v, err == nil
}

// otherCPUs is the CPUs used by other processes between a and b, over
// seconds; ok is false when it cannot be known.
func otherCPUs(a, b snapshot, seconds float64) (float64, bool) {
	if !a.procOK || !b.procOK || seconds <= 0 {
		return 0, false
	}
	other := (b.busy - a.busy) - (b.self - a.self)
	if a.redisOK && b.redisOK {
		other -= b.redis - a.redis
	}
	return max(other, 0) / seconds, true
}

// machineBusy is the CPU time the machine has spent busy: user, nice,
// system and steal (time the hypervisor gave to others). Interrupt time is
// left out: the loopback traffic to Redis is counted there and belongs to
// the benchmark.
func machineBusy() (float64, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, false
	}
	var total float64
	for _, i := range []int{1, 2, 3, 8} { // user nice system ... steal
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return 0, false
		}
		total += v
	}
	return total / clockTicks, true
}

// selfCPU is this process's user and system CPU time.
func selfCPU() (float64, bool) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3, state
	if len(f) < 13 {
		return 0, false
	}
	var total float64
	for _, k := range []int{11, 12} { // utime, stime: fields 14 and 15
		v, err := strconv.ParseFloat(f[k], 64)
		if err != nil {
			return 0, false
		}
		total += v
	}
	return total / clockTicks, true
}
