package redistest

import (
	"io"
	"net"
	"testing"
)

// runner is a Runner that records what it finds while it runs.
type runner struct {
	addr  *string
	saw   string
	reply error // what reading from *addr gave
}

func (r *runner) Run() int {
	r.saw = *r.addr
	conn, err := net.Dial("tcp", r.saw)
	if err != nil {
		r.reply = err
		return 0
	}
	defer conn.Close()
	_, r.reply = conn.Read(make([]byte, 16))
	return 0
}

// TestWithServerWithoutRedis: without redis-server the examples are not
// pointed at the address they default to (a developer's Redis maybe), but
// at a port that closes every connection unanswered.
func TestWithServerWithoutRedis(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no redis-server here
	addr := "localhost:6379"
	r := &runner{addr: &addr}
	if code := WithServer(r, &addr).Run(); code != 0 {
		t.Fatalf("Run = %d", code)
	}
	if r.saw == "localhost:6379" {
		t.Fatal("the tests ran against the default address, which may be a real Redis")
	}
	if r.reply != io.EOF {
		t.Fatalf("reading from %s while the tests ran: %v; want the connection closed unanswered (EOF)", r.saw, r.reply)
	}
}
