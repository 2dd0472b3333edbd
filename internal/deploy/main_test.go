package deploy

import (
	"fmt"
	"os"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
	"go.uber.org/goleak"
)

// srv is the package's shared redis-server; tests use fresh keys, and
// the tests that stop it (SIGSTOP) resume it before they end.
var srv *redistest.Server

func TestMain(m *testing.M) {
	var err error
	srv, err = redistest.Start(redistest.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "internal/deploy tests need redis-server:", err)
		os.Exit(1)
	}
	code := m.Run()
	srv.Close()
	if code == 0 {
		// go-redis retries dialling a dead node in a goroutine that
		// sleeps a second and ends by itself, after its pool is closed.
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
			goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).queuedNewConn.func2")); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
			code = 1
		}
	}
	os.Exit(code)
}
