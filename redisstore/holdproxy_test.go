package redisstore

import (
	"io"
	"net"
	"sync"
	"testing"
)

// holdProxy is a loopback TCP proxy in front of a redis-server that can hold
// back one reply: armed, it keeps the next bytes Redis sends (on whichever
// connection) from the client until the test lets them go. Redis has then
// carried the command out while its caller has not seen the answer, so a
// test can put other calls in between, on other connections, in the order
// it wants.
type holdProxy struct {
	Addr   string
	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu      sync.Mutex
	armed   bool
	held    chan struct{} // closed when the armed hold caught a reply
	release chan struct{} // closed by Release: the held reply goes on
	conns   []net.Conn
	closed  bool
}

// startHoldProxy listens on a free loopback port and forwards every
// connection to target; it is closed, with its connections, at cleanup.
func startHoldProxy(t testing.TB, target string) *holdProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{Addr: ln.Addr().String(), target: target, ln: ln}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *holdProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			s.Close()
			return
		}
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			_, _ = io.Copy(s, c)
			s.Close()
			c.Close()
		}()
		go func() {
			defer p.wg.Done()
			p.replies(s, c)
			s.Close()
			c.Close()
		}()
	}
}

// replies copies what Redis sends to the client, holding the first chunk
// read while the proxy is armed until Release.
func (p *holdProxy) replies(s, c net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := s.Read(buf)
		if n > 0 {
			p.mu.Lock()
			hold := p.armed
			held, release := p.held, p.release
			p.armed = false
			p.mu.Unlock()
			if hold {
				close(held)
				<-release
			}
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Arm makes the proxy hold the next reply; the returned channel is closed
// once it holds one (Redis has carried the command out).
func (p *holdProxy) Arm() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = true
	p.held, p.release = make(chan struct{}), make(chan struct{})
	return p.held
}

// Release lets the held reply go on to the client.
func (p *holdProxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.release != nil {
		close(p.release)
		p.release = nil
	}
}

func (p *holdProxy) close() {
	p.Release()
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
