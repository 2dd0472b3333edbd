// Package pgtest starts throwaway PostgreSQL servers for tests: initdb in
// a temporary directory, postgres on a free loopback port, trust
// authentication, fsync off. PostgreSQL refuses to run as root, so when
// the tests run as root the server runs as the unprivileged user nobody
// (its directory is handed to it). The binaries are found on PATH, else in
// Debian's /usr/lib/postgresql/<version>/bin (./test.sh installs the
// postgresql package when neither has them).
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// Server is one running PostgreSQL server.
type Server struct {
	dir  string
	bin  string // where initdb, postgres and pg_isready are
	port int
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
}

// binDir finds the directory of initdb and postgres.
func binDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := exec.LookPath("postgres"); err == nil {
			if real, err := filepath.EvalSymlinks(p); err == nil {
				p = real // a link on PATH: the directory of the rest (pg_isready) is the link's target's
			}
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) }) // newest first
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("pgtest: initdb and postgres not found (on PATH or in /usr/lib/postgresql/*/bin): install Debian's postgresql")
}

func version(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// credential is who the server runs as: nobody when this process is root.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root, and no user nobody to run PostgreSQL as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// Start initialises and starts a server; Close stops it and removes its
// directory.
func Start() (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, bin: bin, done: make(chan struct{})}
	fail := func(err error) (*Server, error) {
		os.RemoveAll(dir)
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fail(err)
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C")
	initdb.Dir = dir
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("pgtest: initdb: %v: %s", err, out))
	}
	if s.port, err = redistest.FreePort(); err != nil {
		return fail(err)
	}
	if s.log, err = os.Create(filepath.Join(dir, "server.log")); err != nil {
		return fail(err)
	}
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(s.port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=200")
	s.cmd.Dir = dir
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		s.log.Close()
		return fail(err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if s.ready() {
			return s, nil
		}
		select {
		case <-s.done:
			out, _ := os.ReadFile(s.log.Name())
			s.log.Close()
			return fail(fmt.Errorf("pgtest: postgres exited: %s", out))
		case <-time.After(20 * time.Millisecond): // polling a server starting up: no signal to wait on
		}
		if time.Now().After(deadline) {
			s.Close()
			return nil, errors.New("pgtest: postgres did not come up in 30 s")
		}
	}
}

// ready reports whether the server accepts connections, asked with the
// pg_isready beside initdb: no PostgreSQL client library, so the library's
// module, where this package lives, does not require one (pgfence's module
// does).
func (s *Server) ready() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, "pg_isready"), "-q", "-t", "1",
		"-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "-U", "postgres", "-d", "postgres")
	return cmd.Run() == nil
}

// StartT starts a server that the test's cleanup stops.
func StartT(t testing.TB) *Server {
	t.Helper()
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL is a connection string for the postgres database as the superuser.
func (s *Server) URL() string {
	return "postgres://postgres@" + s.Addr() + "/postgres?sslmode=disable"
}

// Pause stops the server's processes (SIGSTOP); Resume continues them.
func (s *Server) Pause() error  { return syscall.Kill(-s.cmd.Process.Pid, syscall.SIGSTOP) }
func (s *Server) Resume() error { return syscall.Kill(-s.cmd.Process.Pid, syscall.SIGCONT) }

// Close stops the server (a fast shutdown, then a kill) and removes its
// directory.
func (s *Server) Close() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGCONT)
		_ = s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
		}
	}
	if s.log != nil {
		s.log.Close()
	}
	os.RemoveAll(s.dir)
}

// Log returns the server's log so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
	return strings.TrimSpace(string(b))
}
