package serve

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/redlimit/redlimit"
)

// certFiles is a certificate and key read from PEM files, read again at
// a handshake when either file changed (size or modification time), so
// that a certificate renewed in place (cert-manager, certbot) is served
// without a restart. A pair that does not load (the cert written, the key
// not yet) keeps the previous one in use until the files change again.
type certFiles struct {
	certFile, keyFile string
	log               *slog.Logger

	mu     sync.Mutex
	cur    *tls.Certificate
	stamp  [2]fileStamp // of the pair in cur
	failed [2]fileStamp // of the last pair that did not load
}

type fileStamp struct {
	size int64
	mod  time.Time
}

func stampOf(name string) fileStamp {
	st, err := os.Stat(name)
	if err != nil {
		return fileStamp{size: -1}
	}
	return fileStamp{st.Size(), st.ModTime()}
}

// newCertFiles loads the pair, or returns nil when neither is set; one
// without the other is an error matching redlimit.ErrInvalidArgument.
func newCertFiles(cfg *Config) (*certFiles, error) {
	if cfg.TLSCert == "" && cfg.TLSKey == "" {
		return nil, nil
	}
	if cfg.TLSCert == "" || cfg.TLSKey == "" {
		return nil, &redlimit.ArgumentError{Arg: "tls", Reason: "TLSCert and TLSKey (--tls-cert, --tls-key) go together: set both or neither", Kind: redlimit.ErrInvalidArgument}
	}
	c := &certFiles{certFile: cfg.TLSCert, keyFile: cfg.TLSKey, log: cfg.Logger}
	c.stamp = c.stamps()
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return nil, fmt.Errorf("serve: TLS certificate: %w", err)
	}
	c.cur = &cert
	return c, nil
}

func (c *certFiles) stamps() [2]fileStamp {
	return [2]fileStamp{stampOf(c.certFile), stampOf(c.keyFile)}
}

// get is tls.Config.GetCertificate.
func (c *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	st := c.stamps()
	c.mu.Lock()
	defer c.mu.Unlock()
	if st == c.stamp || st == c.failed {
		return c.cur, nil
	}
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		c.failed = st
		c.log.Error("redlimit serve: the new TLS certificate does not load, keeping the one in use", "cert", c.certFile, "key", c.keyFile, "err", err)
		return c.cur, nil
	}
	c.cur, c.stamp = &cert, st
	c.log.Info("redlimit serve: TLS certificate reloaded", "cert", c.certFile)
	return c.cur, nil
}

func (c *certFiles) config() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: c.get}
}

// grpcOptions are the gRPC server's options: its bounds, and TLS when
// configured.
func (s *Server) grpcOptions() []grpc.ServerOption {
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(s.cfg.MaxRequestBytes), grpc.ForceServerCodecV2(newCodec())}
	if s.cfg.GRPCWorkers > 0 {
		opts = append(opts, grpc.NumStreamWorkers(uint32(s.cfg.GRPCWorkers)))
	}
	if s.certs != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.certs.config())))
	}
	return opts
}

// serveHTTP serves hs on l, with TLS when configured, its errors (failed
// handshakes, mostly) logged to Logger.
func (s *Server) serveHTTP(hs *http.Server, l net.Listener) error {
	hs.ErrorLog = slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelWarn)
	if s.certs == nil {
		return hs.Serve(l)
	}
	hs.TLSConfig = s.certs.config()
	return hs.ServeTLS(l, "", "")
}
