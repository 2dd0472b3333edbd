// Package redistest runs real redis-server processes for tests.
//
// Every server listens on a free loopback port, keeps its data in a fresh
// temporary directory and is killed when the test binary exits (on Linux the
// kernel delivers SIGKILL to it when its parent goes away). The process
// plumbing lives in a small internal proc type shared by the multi-process
// topologies: StartCluster (Redis Cluster created with redis-cli) and
// StartSentinel (a master, replicas and Sentinel processes). Their waits
// poll the servers with short sleeps and are all bounded; on timeout they
// report the last state observed.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNoServer is returned by Start when no redis-server binary is found in
// PATH.
var ErrNoServer = errors.New("redistest: redis-server not found in PATH")

// errPortInUse marks a start-up failure caused by a port clash, which is
// worth retrying.
var errPortInUse = errors.New("redistest: port already in use")

const (
	serverBinary = "redis-server"
	logName      = "redistest.log"
	startTries   = 5
	readyTimeout = 5 * time.Second
	// loadingTimeout bounds the wait for a server that answers LOADING:
	// alive, reading its AOF, which a run under load may have grown past
	// what readyTimeout reads on a busy machine.
	loadingTimeout = 60 * time.Second
	pollInterval   = 10 * time.Millisecond
	// restartPortWait bounds how long Restart keeps retrying while the old
	// port is momentarily unavailable.
	restartPortWait = 3 * time.Second
)

// Options configures a server started by Start.
type Options struct {
	// AOF turns on the append-only file with fsync after every write
	// (--appendonly yes --appendfsync always), so acknowledged writes
	// survive Kill and Restart(true).
	AOF bool
	// Args are extra redis-server arguments, one argv entry each, for
	// example []string{"--maxmemory", "10mb"}.
	Args []string
	// ShimClock runs the server under the clock shim (clock.go), so that
	// SetClock and StepClock can freeze its wall clock or step it. Start
	// fails with ErrNoCompiler where cc is missing; StartT skips then.
	ShimClock bool
}

// Server is a redis-server process owned by a test. Its methods are safe
// for concurrent use.
type Server struct {
	bin  string
	dir  string
	port int
	args []string
	env  []string // added to the environment of every launch (the clock shim)

	// clockFile is the clock shim's file ("" without Options.ShimClock);
	// clock is what SetClock last wrote to it (under mu).
	clockFile string
	clock     Clock

	// cmdline, if set, builds the command line instead of serverArgs
	// (cluster nodes and Sentinel processes). It is fixed once the server
	// has started, so Restart reuses it.
	cmdline func(aof bool) []string
	// host is the address the server listens on; "" is 127.0.0.1 (a
	// server in a network namespace listens on its end of the veth pair:
	// netns.go).
	host string
	// wrap, if set, turns the server's command line into the one that is
	// run (netns.go: `ip netns exec NS redis-server ...`, which execs the
	// server in place, so the process is the server itself).
	wrap func(bin string, args []string) (string, []string)

	mu     sync.Mutex
	p      *proc // current process; nil before the first launch
	closed bool
}

// Start launches a redis-server on a free loopback port in a new temporary
// directory and waits until it answers PING. If the chosen port is taken by
// the time the server binds it, Start retries with another one.
func Start(opts Options) (*Server, error) {
	return start(opts, nil)
}

// start is Start with a hook that runs before every launch attempt, once
// the port for that attempt has been chosen. The hook may set s.cmdline or
// write files into s.dir; an error from it ends the attempt like a port
// clash when it wraps errPortInUse, and aborts Start otherwise.
func start(opts Options, prepare func(s *Server) error) (*Server, error) {
	bin, err := exec.LookPath(serverBinary)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoServer, err)
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	s := &Server{bin: bin, dir: dir, args: append([]string(nil), opts.Args...)}
	if opts.ShimClock {
		if s.env, err = s.shimEnv(); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}

	for try := 0; try < startTries; try++ {
		s.port, err = FreePort()
		if err != nil {
			continue
		}
		if prepare != nil {
			if err = prepare(s); err != nil {
				if errors.Is(err, errPortInUse) {
					continue
				}
				break
			}
		}
		if err = s.launch(opts.AOF); !errors.Is(err, errPortInUse) {
			break
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// StartT is Start for tests: it fails the test if the server cannot be
// started and closes the server when the test ends. A server with
// Options.ShimClock where no C compiler is found skips the test, saying so.
func StartT(t testing.TB, opts Options) *Server {
	t.Helper()
	s, err := Start(opts)
	if errors.Is(err, ErrNoCompiler) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// StartN starts n independent masters with the same options. On failure
// the servers started so far are closed.
func StartN(n int, opts Options) ([]*Server, error) {
	servers := make([]*Server, 0, n)
	for i := 0; i < n; i++ {
		s, err := Start(opts)
		if err != nil {
			for _, s := range servers {
				s.Close()
			}
			return nil, err
		}
		servers = append(servers, s)
	}
	return servers, nil
}

// StartNT is StartN for tests: it fails the test on error and closes all
// servers when the test ends.
func StartNT(t testing.TB, n int, opts Options) []*Server {
	t.Helper()
	servers, err := StartN(n, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range servers {
		t.Cleanup(s.Close)
	}
	return servers
}

// Addr returns the server address as "127.0.0.1:port" (a server in a
// network namespace: its address in the namespace).
func (s *Server) Addr() string {
	host := s.host
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, strconv.Itoa(s.port))
}

// Port returns the TCP port the server listens on. It does not change
// across Restart.
func (s *Server) Port() int { return s.port }

// Client returns a new go-redis client for the server, with opts applied to
// its options in order. The caller must close it.
func (s *Server) Client(opts ...func(*redis.Options)) *redis.Client {
	o := &redis.Options{Addr: s.Addr()}
	for _, f := range opts {
		f(o)
	}
	return redis.NewClient(o)
}

// Kill sends SIGKILL to the server and waits for it to exit. Unacknowledged
// and, without AOF, all data is lost. Killing a server that is not running
// is a no-op.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p != nil {
		s.p.kill()
	}
	return nil
}

// Pause freezes the server with SIGSTOP: connections stay open but nothing
// is answered until Resume.
func (s *Server) Pause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return errNotRunning
	}
	return s.p.stop()
}

// Stop is Pause under the name of the signal it sends (SIGSTOP). It does
// not shut the server down; use Kill or Close for that.
func (s *Server) Stop() error { return s.Pause() }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return errNotRunning
	}
	return s.p.cont()
}

// Restart kills the server with SIGKILL (if it is running) and starts it
// again on the same port with the same data directory, with or without AOF.
// With aof true and a previous run that also used AOF, every acknowledged
// write is recovered; otherwise the new server starts empty. Restart waits
// until the server answers PING.
func (s *Server) Restart(aof bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("redistest: Restart after Close")
	}
	if s.p != nil {
		s.p.kill()
	}
	deadline := time.Now().Add(restartPortWait)
	for {
		err := s.launch(aof)
		if !errors.Is(err, errPortInUse) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Close kills the server and removes its data directory. It is idempotent
// and may be called after Kill.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	if s.p != nil {
		s.p.kill()
	}
	os.RemoveAll(s.dir)
}

// FlushAll removes all keys from all databases of the server.
func (s *Server) FlushAll() error {
	c := s.Client(func(o *redis.Options) { o.MaxRetries = -1 })
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.FlushAll(ctx).Err()
}

// Log returns the output of the current server process so far, which helps
// when diagnosing test failures.
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return ""
	}
	return s.p.log()
}

// running reports whether the server process has been started and has not
// exited. A paused server is running.
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p != nil && !s.p.exited()
}

// launch starts a process for s and waits until it is ready. It must be
// called with s.mu held or before s is shared.
func (s *Server) launch(aof bool) error {
	addr := s.Addr()
	args := serverArgs(s.port, s.dir, aof, s.args)
	if s.cmdline != nil {
		args = s.cmdline(aof)
	}
	bin := s.bin
	if s.wrap != nil {
		bin, args = s.wrap(bin, args)
	}
	p, err := startProc(bin, args, s.env, s.dir, filepath.Join(s.dir, logName))
	if err != nil {
		return err
	}
	if err := waitReady(p, addr); err != nil {
		p.kill()
		return err
	}
	s.p = p
	return nil
}

// serverArgs builds the redis-server command line.
func serverArgs(port int, dir string, aof bool, extra []string) []string {
	appendonly := "no"
	if aof {
		appendonly = "yes"
	}
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", appendonly,
	}
	if aof {
		args = append(args, "--appendfsync", "always")
	}
	args = append(args,
		"--dir", dir,
		"--repl-diskless-sync-delay", "0",
		"--enable-debug-command", "local",
		"--protected-mode", "no",
	)
	return append(args, extra...)
}

// waitReady polls the server until it answers PING, it exits, or
// readyTimeout passes (loadingTimeout while it answers LOADING).
func waitReady(p *proc, addr string) error {
	start := time.Now()
	deadline := start.Add(readyTimeout)
	for {
		err := probe(addr, p.pid())
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			log := p.logTail(4096)
			if strings.Contains(log, "Address already in use") {
				return fmt.Errorf("%w: %s", errPortInUse, addr)
			}
			return fmt.Errorf("redistest: redis-server on %s exited during start-up (%v); log:\n%s", addr, p.waitErr, log)
		default:
		}
		if time.Now().After(deadline) {
			if strings.Contains(err.Error(), "LOADING") && time.Since(start) < loadingTimeout {
				time.Sleep(pollInterval)
				continue
			}
			return fmt.Errorf("redistest: redis-server on %s not ready after %v (last probe: %v); log:\n%s", addr, time.Since(start).Round(time.Millisecond), err, p.logTail(4096))
		}
		time.Sleep(pollInterval)
	}
}

// freePorts returns n distinct free loopback ports (see freePort).
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	seen := map[int]bool{}
	for len(ports) < n {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		if !seen[p] {
			seen[p] = true
			ports = append(ports, p)
		}
	}
	return ports, nil
}

// FreePort asks the kernel for a free loopback port. The port is released
// before it is used, so a clash is possible and handled by retrying.
// (internal/pgtest uses it too.)
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
