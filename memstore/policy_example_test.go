package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/memstore"
)

// A keyed policy holds a state per key it was asked about, until the key
// is idle long enough to be whole again (then a sweep evicts it) or the
// policy is deleted.
func ExampleStore_PolicyKeys() {
	ctx := context.Background()
	store := memstore.New()
	p, _ := redlimit.NewPolicy(store, "api", []redlimit.Config{redlimit.TokenBucketConfig(10, time.Minute, 10)})
	for _, user := range []string{"alice", "bob", "alice"} {
		p.Key(user).TryAcquire(ctx, 1)
	}
	fmt.Println(store.PolicyKeys("api"))
	p.Delete(ctx)
	fmt.Println(store.PolicyKeys("api"))
	// Output:
	// 2
	// 0
}
