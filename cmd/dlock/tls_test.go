package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// testPKI is a throwaway CA with a server certificate for 127.0.0.1 and a
// client certificate, written as PEM files.
type testPKI struct {
	ca                    *x509.Certificate
	caFile                string
	serverCert, serverKey string
	clientCert, clientKey string
	client                *x509.Certificate
}

// newTestPKI generates the CA and the certificates into a temporary
// directory.
func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	var p testPKI
	caKey, caDER := makeCert(t, &x509.Certificate{
		Subject:               pkix.Name{CommonName: "dlock test CA"},
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}, nil, nil)
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	p.ca = ca
	p.caFile = writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER)

	srvKey, srvDER := makeCert(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca, caKey)
	p.serverCert = writePEM(t, dir, "server.pem", "CERTIFICATE", srvDER)
	p.serverKey = writeKey(t, dir, "server-key.pem", srvKey)

	cliKey, cliDER := makeCert(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "dlock test client"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, caKey)
	if p.client, err = x509.ParseCertificate(cliDER); err != nil {
		t.Fatal(err)
	}
	p.clientCert = writePEM(t, dir, "client.pem", "CERTIFICATE", cliDER)
	p.clientKey = writeKey(t, dir, "client-key.pem", cliKey)
	return p
}

// makeCert makes a key and a certificate from tmpl, signed by parent's
// key (self-signed when parent is nil).
func makeCert(t *testing.T, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	return key, der
}

// writePEM writes one PEM block to dir/name and returns the path.
func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeKey writes key as PEM to dir/name and returns the path.
func writeKey(t *testing.T, dir, name string, key *ecdsa.PrivateKey) string {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, dir, name, "PRIVATE KEY", der)
}

// noEnv is a getenv for an empty environment.
func noEnv(string) string { return "" }

// TestTLSFlags checks the tls.Config that the flags build on top of what
// a rediss:// URL asks for, and the command lines they refuse.
func TestTLSFlags(t *testing.T) {
	p := newTestPKI(t)
	const url = "rediss://127.0.0.1:6380/2"

	tg, err := connFlags{url: url, tlsCA: p.caFile, tlsCert: p.clientCert, tlsKey: p.clientKey, tlsInsecure: true}.options(noEnv)
	if err != nil {
		t.Fatal(err)
	}
	opt := tg.server
	tc := opt.TLSConfig
	if tc == nil {
		t.Fatal("no TLS config")
	}
	want := x509.NewCertPool()
	want.AddCert(p.ca)
	if tc.RootCAs == nil || !tc.RootCAs.Equal(want) {
		t.Errorf("RootCAs is not the pool of the --tls-ca file")
	}
	if len(tc.Certificates) != 1 || len(tc.Certificates[0].Certificate) == 0 ||
		!p.client.Equal(mustParse(t, tc.Certificates[0].Certificate[0])) || tc.Certificates[0].PrivateKey == nil {
		t.Errorf("Certificates %v: want the client certificate and its key", tc.Certificates)
	}
	if !tc.InsecureSkipVerify {
		t.Error("InsecureSkipVerify not set by --tls-insecure")
	}
	if tc.ServerName != "127.0.0.1" || tc.MinVersion < tls.VersionTLS12 || opt.Addr != "127.0.0.1:6380" || opt.DB != 2 {
		t.Errorf("what the URL says is lost: server name %q, min version %x, addr %q, db %d", tc.ServerName, tc.MinVersion, opt.Addr, opt.DB)
	}

	// Only the CA: verification stays on, no client certificate.
	tg, err = connFlags{url: url, tlsCA: p.caFile}.options(noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if tc := tg.server.TLSConfig; tc.InsecureSkipVerify || len(tc.Certificates) != 0 || tc.RootCAs == nil {
		t.Errorf("--tls-ca alone: %+v", tc)
	}
	// No flag: the URL decides; the environment's URL counts as much.
	tg, err = connFlags{}.options(func(k string) string {
		if k == redisURLEnv {
			return url
		}
		return ""
	})
	opt = tg.server
	if err != nil || opt.TLSConfig == nil || opt.TLSConfig.RootCAs != nil || opt.Addr != "127.0.0.1:6380" {
		t.Errorf("rediss:// from $%s: %+v, %v", redisURLEnv, opt, err)
	}
	if tg, err := (connFlags{url: "redis://127.0.0.1:1"}).options(noEnv); err != nil || tg.server.TLSConfig != nil {
		t.Errorf("redis://: TLS config %v, error %v; want none", tg.server.TLSConfig, err)
	}

	garbage := filepath.Join(t.TempDir(), "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		c    connFlags
		want string
	}{
		{connFlags{url: url, tlsCert: p.clientCert}, "--tls-cert and --tls-key go together"},
		{connFlags{url: url, tlsKey: p.clientKey}, "--tls-cert and --tls-key go together"},
		{connFlags{url: url, tlsCA: garbage}, "no PEM certificate"},
		{connFlags{url: url, tlsCA: filepath.Join(t.TempDir(), "missing.pem")}, "--tls-ca"},
		{connFlags{url: url, tlsCert: p.clientKey, tlsKey: p.clientCert}, "--tls-cert/--tls-key"},
		{connFlags{url: "redis://127.0.0.1:1", tlsCA: p.caFile}, "not a rediss:// URL"},
		{connFlags{url: "redis://127.0.0.1:1", tlsInsecure: true}, "not a rediss:// URL"},
	} {
		if _, err := tc.c.options(noEnv); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one saying %q", tc.c, err, tc.want)
		}
	}
	// On the command line these are usage errors, found before any contact.
	r := runCLI("inspect", "--redis", "redis://127.0.0.1:1", "--tls-ca", p.caFile, "x")
	if r.code != exitUsage || !strings.Contains(r.stderr, "not a rediss:// URL") {
		t.Errorf("inspect with --tls-ca and redis://: code %d, stderr %q", r.code, r.stderr)
	}
}

// mustParse parses a DER certificate.
func mustParse(t *testing.T, der []byte) *x509.Certificate {
	t.Helper()
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestTLSServer talks to a redis-server that speaks TLS only on its TLS
// port and requires client certificates: inspect and run get through with
// the CA and the client certificate, and are refused without the client
// certificate or without a CA that vouches for the server.
func TestTLSServer(t *testing.T) {
	p := newTestPKI(t)
	var (
		srv  *redistest.Server
		port int
		err  error
	)
	for try := 0; try < 3 && srv == nil; try++ {
		port, err = freeTCPPort()
		if err != nil {
			continue
		}
		srv, err = redistest.Start(redistest.Options{Args: []string{
			"--tls-port", strconv.Itoa(port),
			"--tls-cert-file", p.serverCert, "--tls-key-file", p.serverKey,
			"--tls-ca-cert-file", p.caFile, "--tls-auth-clients", "yes",
		}})
	}
	if srv == nil {
		t.Fatalf("cannot start a redis-server with TLS: %v", err)
	}
	t.Cleanup(srv.Close)
	url := "rediss://127.0.0.1:" + strconv.Itoa(port)
	prefix := testPrefix(t)
	certs := []string{"--tls-cert", p.clientCert, "--tls-key", p.clientKey}

	args := append([]string{"--redis", url, "--prefix", prefix, "--tls-ca", p.caFile}, certs...)
	if r := runCLI(append(append([]string{"run"}, args...), "job/tls", "--", "true")...); r.code != exitOK {
		t.Errorf("run over TLS: code %d, stderr %q", r.code, r.stderr)
	}
	if r := runCLI(append(append([]string{"inspect"}, args...), "job/tls")...); r.code != exitOK || !strings.Contains(r.stdout, "no lock called") {
		t.Errorf("inspect over TLS: code %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// (a released lock leaves nothing to list)
	if r := runCLI(append(append([]string{"ls", "--json"}, args...), "job/*")...); r.code != exitOK || strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("ls over TLS: code %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// --tls-insecure instead of the CA: the server is not verified, the
	// client certificate still presented.
	args = append([]string{"--redis", url, "--prefix", prefix, "--tls-insecure"}, certs...)
	if r := runCLI(append(append([]string{"inspect"}, args...), "job/tls")...); r.code != exitOK {
		t.Errorf("inspect with --tls-insecure: code %d, stderr %q", r.code, r.stderr)
	}
	if r := runCLI("inspect", "--redis", url, "--tls-ca", p.caFile, "job/tls"); r.code != exitFail {
		t.Errorf("inspect without a client certificate: code %d, want %d; stderr %q", r.code, exitFail, r.stderr)
	}
	if r := runCLI(append(append([]string{"inspect", "--redis", url}, certs...), "job/tls")...); r.code != exitFail ||
		!strings.Contains(r.stderr, "certificate") {
		t.Errorf("inspect without --tls-ca (the server's CA is unknown): code %d, want %d; stderr %q", r.code, exitFail, r.stderr)
	}
}

// freeTCPPort returns a loopback port that was free a moment ago.
func freeTCPPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
