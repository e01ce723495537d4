package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Certs are a CA and the server and client certificates it signed, as PEM
// files in a test's temporary folder.
type Certs struct {
	CAFile, ServerCert, ServerKey, ClientCert, ClientKey string
	pool                                                 *x509.CertPool
	client                                               tls.Certificate
}

// MakeCerts makes a fresh CA with a server certificate for 127.0.0.1 and a
// client certificate.
func MakeCerts(t testing.TB) *Certs {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redlimit test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	c := &Certs{CAFile: filepath.Join(dir, "ca.pem"), pool: x509.NewCertPool()}
	c.pool.AddCert(ca)
	writePEM(t, c.CAFile, "CERTIFICATE", caDER)
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (certFile, keyFile string) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalECPrivateKey(key)
		certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		writePEM(t, certFile, "CERTIFICATE", der)
		writePEM(t, keyFile, "EC PRIVATE KEY", kder)
		return certFile, keyFile
	}
	c.ServerCert, c.ServerKey = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	c.ClientCert, c.ClientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	c.client, err = tls.LoadX509KeyPair(c.ClientCert, c.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ClientTLS returns a client TLS config trusting the CA, with the client
// certificate when withCert is set.
func (c *Certs) ClientTLS(withCert bool) *tls.Config {
	cfg := &tls.Config{RootCAs: c.pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	if withCert {
		cfg.Certificates = []tls.Certificate{c.client}
	}
	return cfg
}

// StartTLS starts a server that also listens with TLS (clients must show a
// certificate when mutual is set) and returns it with its TLS address.
func StartTLS(t testing.TB, c *Certs, mutual bool, extra ...string) (*Server, string) {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	auth := "no"
	if mutual {
		auth = "yes"
	}
	args := append([]string{"--tls-port", fmt.Sprint(port), "--tls-cert-file", c.ServerCert, "--tls-key-file", c.ServerKey,
		"--tls-ca-cert-file", c.CAFile, "--tls-auth-clients", auth}, extra...)
	return Start(t, args...), fmt.Sprintf("127.0.0.1:%d", port)
}

func writePEM(t testing.TB, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
