package dlock_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Side by side (design/TESTING.md): a go-redis client's commands go on
// dlock's own connections (internal/wire) unless WithoutOwnConnections
// sends them through the client's pool. Each row of sideRows meets one
// fault through both, and the own connections must do no worse.
//
// To add a row: a run that makes its Clients with dlock.New(rdb,
// opts...) and returns what went wrong for the user (bad: each broken
// promise, logged) and, where it times something, how long the worst
// effect lasted (took), with the slack that timing needs on a loaded
// machine. A fault whose fix is not in yet has no row.
//
// Three faults of the side by side have tests of their own that run each
// case through both paths and hold both to the same outcome, stricter than
// "no worse": a reset after the server ran the call
// (TestAcquireResentAfterResetLeavesNoLateHolder, and internal/goredis
// TestResetAfterTheServerRanIsReportedSentTwice), a write blocked on full
// socket buffers (TestTryLockWhoseWriteBlocksReturnsAtCtxEnd: no grant
// after the ctx, the own connections' slowest return no later than twice
// the pool's), and an ACL user with a database and a client name
// (TestDocumentedGrantWithDBAndName).

// sideResult is what a row's run measured: the lower the better.
type sideResult struct {
	bad  int           // broken promises (double grants, holds never ended, calls that failed)
	took time.Duration // the worst lasting effect the row times (0: none timed)
}

// sideRow is one fault run through both paths.
type sideRow struct {
	name string
	// run meets the fault with Clients made by dlock.New(rdb, opts...).
	run func(t *testing.T, opts ...dlock.Option) sideResult
	// slack is how much longer took may be on the own connections.
	slack time.Duration
}

var sideRows = []sideRow{
	{name: "sentinel failover", run: sideFailover},
	{name: "client closed", run: sideClosed, slack: 500 * time.Millisecond},
	{name: "TLS", run: sideTLS},
	{name: "server stopped", run: sideStopped, slack: 250 * time.Millisecond},
}

func TestOwnConnectionsNeverWorseThanThePool(t *testing.T) {
	onlyGoRedis(t)
	for _, row := range sideRows {
		t.Run(row.name, func(t *testing.T) {
			var pool, own sideResult
			t.Run("pool", func(t *testing.T) { pool = row.run(t, dlock.WithoutOwnConnections()) })
			t.Run("own", func(t *testing.T) { own = row.run(t) })
			t.Logf("through the pool: %d broken, %v; on own connections: %d broken, %v", pool.bad, pool.took, own.bad, own.took)
			if own.bad > pool.bad {
				t.Errorf("own connections: %d broken promises, through the pool %d", own.bad, pool.bad)
			}
			if own.took > pool.took+row.slack {
				t.Errorf("own connections: %v, through the pool %v (slack %v)", own.took, pool.took, row.slack)
			}
		})
	}
}

// sideFailover: pairs of TryLock from a Client already running and a new
// one around SENTINEL FAILOVER (failoverRun); bad: pairs begun past
// followWithin after it in which both got the lock.
func sideFailover(t *testing.T, opts ...dlock.Option) sideResult {
	redistest.Long(t) // two Sentinel failovers (TestSentinelFailoverFollowedByARunningClient runs one on every run)
	n := failoverRun(t, 1500*time.Millisecond, false, opts...)
	if n.lateSome < 10 {
		t.Fatalf("only %d pairs took the lock %v after the failover: the run shows nothing", n.lateSome, followWithin)
	}
	return sideResult{bad: n.lateBoth}
}

// sideClosed: the go-redis client closed under a held Mutex and a leader
// (closedRun); took: until both holds were told.
func sideClosed(t *testing.T, opts ...dlock.Option) sideResult {
	bad, took := closedRun(t, opts...)
	return sideResult{bad: bad, took: took}
}

// sideTLS: a server that speaks TLS only; a Lock, a TryLock refused, a
// Lock woken by a release (pub/sub over TLS) and the Unlocks; bad: each
// that failed.
func sideTLS(t *testing.T, opts ...dlock.Option) sideResult {
	addr, conf := tlsServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	newOne := func() *dlock.Client {
		rdb := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: conf})
		t.Cleanup(func() { _ = rdb.Close() })
		c, err := dlock.New(rdb, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	a, b := newOne(), newOne()
	name := lockName(t)
	var r sideResult
	fail := func(what string, err error) {
		t.Logf("%s: %v", what, err)
		r.bad++
	}
	l, err := a.Mutex(name).Lock(ctx)
	if err != nil {
		fail("Lock", err)
		return r
	}
	if _, err := b.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		fail("TryLock of a held lock", err)
	}
	got := make(chan error, 1)
	go func() {
		l2, err := b.Mutex(name).Lock(ctx)
		if err == nil {
			err = l2.Unlock(ctx)
		}
		got <- err
	}()
	waitFor(t, "the waiter to queue", func() bool {
		ws, err := a.Inspect(ctx, dlock.KindMutex, name)
		return err == nil && len(ws.Waiters) > 0
	})
	if err := l.Unlock(ctx); err != nil {
		fail("Unlock", err)
	}
	if err := <-got; err != nil {
		fail("Lock woken by the release, and its Unlock", err)
	}
	return r
}

// sideStopped: the server stopped (SIGSTOP) under TryLocks with a 200 ms
// ctx; took: the latest return past the ctx's end; bad: the returns
// later than 300 ms past it.
func sideStopped(t *testing.T, opts ...dlock.Option) sideResult {
	s := redistest.StartT(t, redistest.Options{})
	rdb := newRedis(t, s)
	c, err := dlock.New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	name := lockName(t)
	unlock(t, mustLock(t, c.Mutex(name), context.Background())) // connected, scripts loaded
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Resume() }) // before Close: a Cleanup runs last-in first
	const ctxFor, late = 200 * time.Millisecond, 300 * time.Millisecond
	var r sideResult
	for i := range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), ctxFor)
		start := time.Now()
		_, err := c.Mutex(name).TryLock(ctx)
		over := time.Since(start) - ctxFor
		cancel()
		if err == nil {
			t.Logf("TryLock %d got the lock from a stopped server", i)
			r.bad++
		}
		if over > late {
			t.Logf("TryLock %d returned %v after its ctx ended", i, over)
			r.bad++
		}
		r.took = max(r.took, over)
	}
	return r
}

// tlsServer starts a redis-server that speaks TLS only, with a
// certificate for 127.0.0.1 made for it, and returns its address and a
// client configuration that trusts it.
func tlsServer(t *testing.T) (string, *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	var s *redistest.Server
	var port int
	for try := 0; try < 3 && s == nil; try++ {
		if port, err = redistest.FreePort(); err != nil {
			continue
		}
		s, err = redistest.Start(redistest.Options{Args: []string{"--tls-port", strconv.Itoa(port),
			"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", certFile,
			"--tls-auth-clients", "no"}})
	}
	if s == nil {
		t.Fatalf("cannot start a redis-server with TLS: %v", err)
	}
	t.Cleanup(s.Close)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
}
