package syncbuf_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/redlimit/redlimit/internal/syncbuf"
)

// TestConcurrentWrites: every write from every goroutine is kept whole.
func TestConcurrentWrites(t *testing.T) {
	var b syncbuf.Buffer
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				fmt.Fprintf(&b, "%d.%d\n", g, i)
			}
		})
	}
	wg.Wait()
	got := b.String()
	for g := range 8 {
		for i := range 100 {
			if want := fmt.Sprintf("\n%d.%d\n", g, i); !strings.Contains("\n"+got, want) {
				t.Fatalf("%q missing", want)
			}
		}
	}
}
