package redistest

import (
	"os"
	"testing"
)

// EnvFull is the environment variable that `./test.sh --full` (what CI
// runs) sets to 1: the long runs run too, and the runs that have a short
// default run at their full length.
const EnvFull = "DLOCK_TEST_FULL"

// Full reports whether this is a full run (DLOCK_TEST_FULL=1, as
// `./test.sh --full` sets it): long runs (soaks, repeated rounds of a
// race, failover sequences) at their full length. The default
// `./test.sh` runs them shorter or not at all.
func Full() bool { return os.Getenv(EnvFull) == "1" }

// Long skips t unless this is a full run: a long run that `./test.sh`
// leaves to `./test.sh --full` (DLOCK_TEST_FULL=1).
func Long(t testing.TB) {
	t.Helper()
	if !Full() {
		t.Skip("a long run: only under ./test.sh --full (" + EnvFull + "=1)")
	}
}
