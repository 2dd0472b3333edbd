package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// demoServer is the Redis a demo runs against: one named by --redis, a
// throwaway redis-server the demo started, or an embedded miniredis.
type demoServer struct {
	url  string // its URL (any form of --redis), for the demo and its workers
	addr string // host:port; for a URL given, where dial found it (target.where)
	kind string // what it is, for the "server:" line
	// version is the server's version when known at start; the demo asks
	// the server otherwise.
	version string
	given   bool   // named by --redis
	stop    func() // releases whatever starting it took; idempotent
}

// Throwaway server start-up limits.
const (
	serverStartTries = 5
	serverReadyWait  = 5 * time.Second
	serverPoll       = 10 * time.Millisecond
	serverLogName    = "redis-server.log"
)

// chooseServer picks the demo's server: url when given, else a throwaway
// redis-server when one is in PATH (unless embedded forces miniredis),
// else an embedded miniredis. The caller calls stop when done.
func chooseServer(ctx context.Context, url string, embedded bool) (*demoServer, error) {
	if url != "" {
		return &demoServer{url: url, kind: "redis-server", given: true, stop: func() {}}, nil // addr: once dialled
	}
	if !embedded {
		if bin, err := exec.LookPath("redis-server"); err == nil {
			return startThrowaway(ctx, bin)
		}
	}
	return startEmbedded()
}

// startThrowaway starts bin on a free loopback port with a fresh data
// directory and nothing persisted, and waits until it answers. stop kills
// it and removes the directory.
func startThrowaway(ctx context.Context, bin string) (*demoServer, error) {
	dir, err := os.MkdirTemp("", "dlock-demo-redis-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for try := 0; try < serverStartTries; try++ {
		port, err := freePort()
		if err != nil {
			lastErr = err
			continue
		}
		s, err := launchRedis(ctx, bin, dir, port)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

// errPortTaken marks a start that failed because another process took the
// port between freePort and the server's bind; worth another try.
var errPortTaken = errors.New("port already in use")

// launchRedis runs one redis-server on port and waits until it is ready.
func launchRedis(ctx context.Context, bin, dir string, port int) (*demoServer, error) {
	logPath := filepath.Join(dir, serverLogName)
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own descriptor
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so that Ctrl-C reaches the demo, which then
	// stops the server after its workers; and killed with the demo if the
	// demo dies.
	setProcAttr(cmd, true)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	var once sync.Once
	kill := func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			<-exited
		})
	}

	version, err := waitRedis(ctx, addr, cmd.Process.Pid, exited)
	if err != nil {
		kill()
		if b, _ := os.ReadFile(logPath); strings.Contains(string(b), "Address already in use") {
			return nil, fmt.Errorf("%w: %s", errPortTaken, addr)
		}
		return nil, err
	}
	return &demoServer{
		url:     "redis://" + addr,
		addr:    addr,
		kind:    "throwaway redis-server",
		version: version,
		stop: func() {
			kill()
			os.RemoveAll(dir)
		},
	}, nil
}

// waitRedis polls addr until the redis-server with process id pid answers
// (checking the pid makes sure that no other server owns the port), and
// returns its version.
func waitRedis(ctx context.Context, addr string, pid int, exited <-chan struct{}) (string, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 500 * time.Millisecond})
	defer rdb.Close()
	deadline := time.NewTimer(serverReadyWait)
	defer deadline.Stop()
	poll := time.NewTicker(serverPoll)
	defer poll.Stop()
	want := strconv.Itoa(pid)
	for {
		info, err := rdb.Info(ctx, "server").Result()
		if err == nil && infoField(info, "process_id") == want {
			return infoField(info, "redis_version"), nil
		}
		select {
		case <-exited:
			return "", fmt.Errorf("redis-server on %s exited during start-up", addr)
		case <-deadline.C:
			return "", fmt.Errorf("redis-server on %s not ready after %v (last: %v)", addr, serverReadyWait, err)
		case <-ctx.Done():
			return "", ctx.Err()
		case <-poll.C:
		}
	}
}

// freePort asks the kernel for a free loopback port. It is free only until
// someone else takes it, hence the retries in startThrowaway.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// clockTick is how often the embedded server's clock moves on, by the real
// time elapsed but at most clockStep. A forward shortens every key's TTL,
// also a key set just before it: capping the step keeps such a key from
// expiring more than clockStep early, below a lease's 2 ms of slack. When
// ticks come late (a loaded machine) the clock falls behind, and keys
// expire late, never early.
const (
	clockTick = time.Millisecond
	clockStep = 2 * time.Millisecond
)

// startEmbedded starts a miniredis in this process, listening on a loopback
// port so that worker processes can reach it. miniredis expires keys only
// when told that time has passed, so a goroutine fast-forwards it every
// clockTick (see clockStep).
func startEmbedded() (*demoServer, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("embedded miniredis: %w", err)
	}
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(clockTick)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-quit:
				return
			case now := <-t.C:
				m.FastForward(min(now.Sub(last), clockStep))
				last = now
			}
		}
	}()
	var once sync.Once
	return &demoServer{
		url:     "redis://" + m.Addr(),
		addr:    m.Addr(),
		kind:    "embedded miniredis",
		version: moduleVersion("github.com/alicebob/miniredis/v2"),
		stop: func() {
			once.Do(func() {
				close(quit)
				<-done
				m.Close()
			})
		},
	}, nil
}

// moduleVersion is the version of the module path built into this binary,
// or "" when the build does not say.
func moduleVersion(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			return d.Version
		}
	}
	return ""
}
