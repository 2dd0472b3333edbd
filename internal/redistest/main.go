package redistest

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Main is the TestMain of a package whose tests share one redis-server:
// it starts it in *srv, runs the tests, stops it and, when they passed,
// fails on goroutines left behind (go-redis's pool retries dialling a
// dead node in a goroutine that sleeps a second and ends by itself,
// after its pool is closed: ignored). It returns the exit code.
func Main(m *testing.M, srv **Server) int {
	s, err := Start(Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "these tests need redis-server:", err)
		return 1
	}
	*srv = s
	code := m.Run()
	s.Close()
	if code == 0 {
		if err := goleak.Find(Ignored()...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
			code = 1
		}
	}
	return code
}

// Ignored are the goroutines goleak lets be: go-redis's pool retries
// dialling a dead node (a killed cluster master, a stopped server) in a
// goroutine that sleeps a second and ends by itself, after its pool is
// closed.
func Ignored() []goleak.Option {
	return []goleak.Option{goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).queuedNewConn.func2")}
}
