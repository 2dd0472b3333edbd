package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// TestLeaderAndRunValue: "dlock run --value V NAME -- CMD" leads the
// election NAME while CMD runs, and "dlock leader NAME" shows V (text and
// JSON) then, once CMD has exited and run resigned, nobody.
func TestLeaderAndRunValue(t *testing.T) {
	prefix, name := testPrefix(t), "primary"
	leader := func(args ...string) result {
		return runCLI(append([]string{"leader", "--redis", serverURL(), "--prefix", prefix}, append(args, name)...)...)
	}
	if r := leader(); r.code != exitNoLeader || !strings.Contains(r.stdout, "no leader") {
		t.Fatalf("leader of an empty election: %+v", r)
	}
	release := filepath.Join(t.TempDir(), "release")
	var wg sync.WaitGroup
	var ran result
	wg.Go(func() {
		ran = runCLI("run", "--redis", serverURL(), "--prefix", prefix, "--value", "db-1:5432", name, "--",
			"sh", "-c", `while [ ! -e "$0" ]; do sleep 0.01; done; echo "term=$DLOCK_FENCE"`, release)
	})
	waitFor(t, 10*time.Second, "run to lead", func() bool { return leader().code == exitOK })
	r := leader()
	if !strings.Contains(r.stdout, `"db-1:5432"`) || !strings.Contains(r.stdout, "term:") {
		t.Fatalf("leader while run leads: %+v", r)
	}
	var j leaderJSON
	if r := leader("--json"); r.code != exitOK || json.Unmarshal([]byte(r.stdout), &j) != nil || !j.Leader ||
		j.Value != "db-1:5432" || j.Term <= 0 || j.Owner == nil {
		t.Fatalf("leader --json: %+v (%+v)", r, j)
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if ran.code != exitOK || !strings.Contains(ran.stdout, fmt.Sprint("term=", j.Term)) {
		t.Fatalf("run --value: %+v; want status 0 and the term as DLOCK_FENCE", ran)
	}
	if r := leader(); r.code != exitNoLeader {
		t.Fatalf("leader after run resigned: %+v", r)
	}
	if r := runCLI("run", "--prefix", prefix, "--value", "x", "-n", name, "--", "true"); r.code != exitUsage {
		t.Fatalf("run --value -n: %+v; want a usage error", r)
	}
}

// TestLeaderWatch: "dlock leader --watch" prints the first state, then a
// line per change — elected, proclaimed, nobody — until its ctx ends
// (SIGINT or SIGTERM in the command), with status 0.
func TestLeaderWatch(t *testing.T) {
	prefix, name := testPrefix(t), "primary"
	opt, err := parseTarget(serverURL())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lines := make(chan string, 16)
	emit := func(info dlock.LeaderInfo, at time.Time) error {
		lines <- strings.TrimSpace(leaderLine(info, at))
		return nil
	}
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- watchLeader(ctx, opt, prefix, name, emit, &stderr) }()
	expect := func(want string) {
		t.Helper()
		select {
		case l := <-lines:
			if !strings.Contains(l, want) {
				t.Fatalf("watch printed %q; want %q", l, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("watch printed nothing; want %q (stderr %q)", want, stderr.String())
		}
	}
	expect("no leader")
	c := dlockClient(t, prefix)
	ld, err := c.Election(name).Campaign(testCtx(t), "a")
	if err != nil {
		t.Fatal(err)
	}
	expect(`leader "a"`)
	if err := ld.Proclaim(testCtx(t), "b"); err != nil {
		t.Fatal(err)
	}
	expect(`leader "b"`)
	if err := ld.Resign(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	expect("no leader")
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("watch ended with %d; want 0 (stderr %q)", code, stderr.String())
	}
}
