package traffic_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redlimit/redlimit/serve/traffic"
)

// BenchmarkObserve is the cost a recorded call adds: one event of one of
// 1000 keys over 10 policies, from parallel callers.
func BenchmarkObserve(b *testing.B) {
	r, err := traffic.New(traffic.Options{})
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
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
