//go:build unix

package torture

import (
	"flag"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"go.uber.org/goleak"
)

// go-redis retries dialling a dead node (a killed or restarting server)
// in a goroutine that sleeps a second and ends by itself after its pool is
// closed.
var leakOpts = []goleak.Option{goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
	// DLOCK_TEST_DRIVER=rueidis or valkey-go: a cluster client closes the
	// connections of nodes that left its slot map 5 s later.
	goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
	goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*clusterClient)._refresh.func2")}

func TestMain(m *testing.M) {
	if os.Getenv(EnvWorker) != "" {
		os.Exit(WorkerMain(func() error { return goleak.Find(leakOpts...) }))
	}
	goleak.VerifyTestMain(m, leakOpts...)
}

var (
	flagLong     = flag.Bool("torture.long", false, "run a long soak (10 minutes unless -torture.duration or DLOCK_TORTURE says otherwise)")
	flagDuration = flag.Duration("torture.duration", 0, "length of the load phase (default 15s; 38s under ./test.sh --full, DLOCK_TEST_FULL=1; or $DLOCK_TORTURE)")
	flagSeed     = flag.Uint64("torture.seed", 0, "seed (default $DLOCK_TORTURE_SEED, else random)")
)

// TestTorture runs the randomized torture test: worker processes issue
// random mixes of every operation while faults are injected; the history
// is checked for safety and liveness violations.
//
// Environment: DLOCK_TORTURE_SEED (replay a seed), DLOCK_TORTURE (a
// duration: a long soak, e.g. 10m), DLOCK_TORTURE_SCENARIOS and
// DLOCK_TORTURE_FAULTS ("a=3,b" or "none": which scenarios and faults, by
// weight; "+a=3,b" changes only those of the defaults: "+clockforward"
// adds forward steps of the server's clock), DLOCK_TORTURE_WORKERS,
// DLOCK_TORTURE_GOROUTINES.
func TestTorture(t *testing.T) {
	if testing.Short() {
		t.Skip("torture test skipped in -short mode")
	}
	seed := *flagSeed
	if s := os.Getenv("DLOCK_TORTURE_SEED"); seed == 0 && s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("DLOCK_TORTURE_SEED=%q: %v", s, err)
		}
	}
	if seed == 0 {
		seed = rand.Uint64() % 1e9
	}
	d := 38 * time.Second
	if !redistest.Full() {
		d = 15 * time.Second // ./test.sh; ./test.sh --full (DLOCK_TEST_FULL=1) runs 38 s
	}
	if *flagLong {
		d = 10 * time.Minute
	}
	if s := os.Getenv("DLOCK_TORTURE"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			t.Fatalf("DLOCK_TORTURE=%q: %v", s, err)
		}
	}
	if *flagDuration != 0 {
		d = *flagDuration
	}
	scn, err := weights(os.Getenv("DLOCK_TORTURE_SCENARIOS"), defaultWeights)
	if err != nil {
		t.Fatalf("DLOCK_TORTURE_SCENARIOS: %v", err)
	}
	faults, err := weights(os.Getenv("DLOCK_TORTURE_FAULTS"), defaultFaults)
	if err != nil {
		t.Fatalf("DLOCK_TORTURE_FAULTS: %v", err)
	}
	workers, _ := strconv.Atoi(envOr("DLOCK_TORTURE_WORKERS", "3"))
	gors, _ := strconv.Atoi(envOr("DLOCK_TORTURE_GOROUTINES", "4"))
	replay := "DLOCK_TORTURE_SEED=" + strconv.FormatUint(seed, 10) + " go test -race ./internal/torture -run TestTorture -v"
	t.Logf("seed %d, load %v, %d workers x %d goroutines, scenarios %v, faults %v", seed, d, workers, gors, scn, faults)
	t.Logf("replay: %s", replay)

	dir, err := os.MkdirTemp("", "dlock-torture-")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(Options{Seed: seed, Duration: d, Workers: workers, Goroutines: gors,
		Weights: scn, Faults: faults, Dir: dir, Logf: t.Logf})
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	t.Log(res.Summary)
	if len(res.Violations) == 0 {
		if os.Getenv("DLOCK_TORTURE_KEEP") == "" {
			os.RemoveAll(dir)
		} else {
			t.Logf("history kept in %s", res.History)
		}
		return
	}
	t.Errorf("seed %d: %s", seed, res.Report(12))
	t.Errorf("seed %d: first violation (%s) %.3fs into the run; replay with: %s",
		seed, res.Violations[0].Kind, float64(res.Violations[0].T-res.Start)/1e9, replay)
}
