package transport

import (
	"os"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// srv is the package's shared redis-server; tests use fresh keys, and
// the tests that stop it (SIGSTOP) resume it before they end.
var srv *redistest.Server

func TestMain(m *testing.M) { os.Exit(redistest.Main(m, &srv)) }
