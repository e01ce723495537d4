package serve_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/serve"
)

func tlsRLSClient(t *testing.T, addr string, cfg *tls.Config) rlsv3.RateLimitServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return rlsv3.NewRateLimitServiceClient(cc)
}

// httpsGet is GET url on a connection of its own.
func httpsGet(url string, cfg *tls.Config) (int, error) {
	tr := &http.Transport{TLSClientConfig: cfg}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// TestTLS serves both ports with TLS: gRPC and HTTPS clients trusting
// the CA are answered, plaintext clients are not.
func TestTLS(t *testing.T) {
	certs := redistest.MakeCerts(t) // a CA and a server certificate for 127.0.0.1
	ts := start(t, serve.Config{Rules: "testdata/edge.yaml", TLSCert: certs.ServerCert, TLSKey: certs.ServerKey})

	resp, err := tlsRLSClient(t, ts.grpcAddr, certs.ClientTLS(false)).ShouldRateLimit(context.Background(), edgeReq)
	if err != nil || resp.OverallCode != ok {
		t.Fatalf("gRPC over TLS: %v %v", resp, err)
	}
	if code, err := httpsGet("https://"+ts.httpAddr+"/healthz", certs.ClientTLS(false)); err != nil || code != http.StatusOK {
		t.Fatalf("HTTPS: %d %v", code, err)
	}

	if _, err := rlsClient(t, ts.grpcAddr).ShouldRateLimit(context.Background(), edgeReq); err == nil {
		t.Error("plaintext gRPC answered")
	}
	if code, err := httpsGet("http://"+ts.httpAddr+"/healthz", nil); err == nil && code == http.StatusOK {
		t.Error("plaintext HTTP answered")
	}
	if _, err := httpsGet("https://"+ts.httpAddr+"/healthz", &tls.Config{MinVersion: tls.VersionTLS12}); err == nil {
		t.Error("a client not trusting the CA got through")
	}
}

// TestTLSReload renews the certificate in place: new connections get
// the new one without a restart.
func TestTLSReload(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	install := func(c *redistest.Certs) {
		for _, f := range [][2]string{{c.ServerKey, key}, {c.ServerCert, cert}} {
			data, err := os.ReadFile(f[0])
			if err != nil {
				t.Fatal(err)
			}
			replace(t, f[1], string(data))
		}
	}
	old, renewed := redistest.MakeCerts(t), redistest.MakeCerts(t) // two CAs
	install(old)
	ts := start(t, serve.Config{Rules: "testdata/edge.yaml", TLSCert: cert, TLSKey: key})
	url := "https://" + ts.httpAddr + "/healthz"
	if code, err := httpsGet(url, old.ClientTLS(false)); err != nil || code != http.StatusOK {
		t.Fatalf("before: %d %v", code, err)
	}
	install(renewed)
	if code, err := httpsGet(url, renewed.ClientTLS(false)); err != nil || code != http.StatusOK {
		t.Fatalf("renewed: %d %v", code, err)
	}
	if _, err := httpsGet(url, old.ClientTLS(false)); err == nil {
		t.Fatal("still the old certificate")
	}
	// A broken pair (a key of another certificate) keeps the one in use.
	data, err := os.ReadFile(old.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	replace(t, key, string(data))
	if code, err := httpsGet(url, renewed.ClientTLS(false)); err != nil || code != http.StatusOK {
		t.Fatalf("after a bad key: %d %v", code, err)
	}
}

func TestTLSConfigErrors(t *testing.T) {
	certs := redistest.MakeCerts(t)
	for _, cfg := range []serve.Config{
		{Rules: "testdata/edge.yaml", TLSCert: certs.ServerCert},
		{Rules: "testdata/edge.yaml", TLSKey: certs.ServerKey},
	} {
		if _, err := serve.New(context.Background(), cfg); !errors.Is(err, redlimit.ErrInvalidArgument) {
			t.Errorf("%q %q: %v", cfg.TLSCert, cfg.TLSKey, err)
		}
	}
	_, err := serve.New(context.Background(), serve.Config{Rules: "testdata/edge.yaml", TLSCert: certs.ServerCert, TLSKey: filepath.Join(t.TempDir(), "missing.pem")})
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing key: %v", err)
	}
	_, err = serve.New(context.Background(), serve.Config{Rules: "testdata/edge.yaml", TLSCert: certs.ServerCert, TLSKey: certs.ClientKey})
	if err == nil {
		t.Error("a key of another certificate: no error")
	}
}
