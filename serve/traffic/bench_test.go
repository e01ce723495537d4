package traffic_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redlimit/redlimit/serve/traffic"
)

// BenchmarkObserve is the cost a recorded call adds: one event of one of
// 1000 keys (100 a policy: all counted) or 100000 keys (more than the
// top keys kept: a new key takes the place of the least counted) over 10
// policies, from parallel callers.
func BenchmarkObserve(b *testing.B) {
	for _, n := range []int{1000, 100000} {
		b.Run("keys="+strconv.Itoa(n), func(b *testing.B) { benchObserve(b, n) })
	}
}

func benchObserve(b *testing.B, n int) {
	r, err := traffic.New(traffic.Options{})
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "10." + strconv.Itoa(i/65536) + "." + strconv.Itoa(i/256%256) + "." + strconv.Itoa(i%256)
	}
	at := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			r.Observe(context.Background(), event("p"+strconv.Itoa(i%10), keys[i%len(keys)], i%7 != 0, at))
			i++
		}
	})
}
