//go:build unix

package main

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runArgs is the start of a "dlock run" command line on the test server.
func runArgs(t *testing.T, flags ...string) []string {
	return append([]string{"run", "--redis", serverURL(), "--prefix", testPrefix(t)}, flags...)
}

// startRun calls run in a goroutine and returns its output buffers and a
// channel that delivers its exit status.
func startRun(args []string) (stdout, stderr *syncBuffer, code <-chan int) {
	stdout, stderr = new(syncBuffer), new(syncBuffer)
	c := make(chan int, 1)
	go func() { c <- run(args, stdout, stderr) }()
	return stdout, stderr, c
}

// await returns the exit status from code, failing the test after timeout.
func await(t *testing.T, code <-chan int, timeout time.Duration) int {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case c := <-code:
		return c
	case <-timer.C:
		t.Fatalf("run did not return within %v", timeout)
		return 0
	}
}

// fenceLine matches what the test children print.
var fenceLine = regexp.MustCompile(`(?m)^fence=(\d+) name=(\S+)$`)

// TestRunGivesTheChildItsFence runs a child twice: it sees its fence and
// the lock name in its environment, the fence grows, the lock is released.
func TestRunGivesTheChildItsFence(t *testing.T) {
	const name = "job/fence"
	var fences []int64
	for i := 0; i < 2; i++ {
		r := runCLI(runArgs(t, name, "--", "sh", "-c", `echo "fence=$DLOCK_FENCE name=$DLOCK_NAME"`)...)
		if r.code != exitOK {
			t.Fatalf("code %d, want 0; stderr:\n%s", r.code, r.stderr)
		}
		m := fenceLine.FindStringSubmatch(r.stdout)
		if m == nil || m[2] != name {
			t.Fatalf("the child did not print its fence and name: %q", r.stdout)
		}
		f, _ := strconv.ParseInt(m[1], 10, 64)
		fences = append(fences, f)
		if !strings.Contains(r.stderr, fmt.Sprintf("holding lock %q, fence %d", name, f)) {
			t.Errorf("stderr does not tell the fence: %q", r.stderr)
		}
	}
	if fences[0] < 1 || fences[1] <= fences[0] {
		t.Errorf("fences %v: want positive and increasing", fences)
	}
	// Released at the end.
	n, err := testClient(t).Exists(testCtx(t), keysFor(testPrefix(t), name).Lock).Result()
	if err != nil || n != 0 {
		t.Errorf("the lock key is still there after run (exists %d, %v)", n, err)
	}
}

// TestRunPassesTheExitStatusOn checks that run exits as its child did,
// and with 127 when the command does not exist.
func TestRunPassesTheExitStatusOn(t *testing.T) {
	r := runCLI(runArgs(t, "--quiet", "job/status", "--", "sh", "-c", "exit 3")...)
	if r.code != 3 || r.stderr != "" {
		t.Errorf("code %d, stderr %q; want 3 and nothing said under --quiet", r.code, r.stderr)
	}
	r = runCLI(runArgs(t, "job/status", "--", "/nonexistent/dlock-test-command")...)
	if r.code != exitNotFound {
		t.Errorf("missing command: code %d, want %d; stderr %q", r.code, exitNotFound, r.stderr)
	}
}

// TestRunStopsTheChildWhenTheLeaseIsLost deletes the lock while the child
// runs: the next renewal finds it gone, and run must stop the child (which
// would sleep for 30 s) with SIGTERM and fail.
func TestRunStopsTheChildWhenTheLeaseIsLost(t *testing.T) {
	const name = "job/lost"
	stdout, stderr, code := startRun(runArgs(t, "--ttl", "600ms", "--grace", "2s", name,
		"--", "sh", "-c", "echo started; exec sleep 30"))
	waitFor(t, 5*time.Second, "the child to start", func() bool { return strings.Contains(stdout.String(), "started") })
	start := time.Now()
	if err := testClient(t).Del(testCtx(t), keysFor(testPrefix(t), name).Lock).Err(); err != nil {
		t.Fatal(err)
	}
	got := await(t, code, 10*time.Second)
	if got != exitLost || !strings.Contains(stderr.String(), fmt.Sprintf("exited with status %d", 128+int(syscall.SIGTERM))) {
		t.Errorf("code %d, want %d (the lease was lost), and the child's SIGTERM status said; stderr:\n%s", got, exitLost, stderr)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("run took %v after the lock vanished; the renewal is due within 200ms", d)
	}
	if !strings.Contains(stderr.String(), "lease lost") {
		t.Errorf("stderr does not say the lease was lost:\n%s", stderr)
	}
}

// TestRunKillsAChildThatIgnoresSIGTERM checks the grace period: a child
// that ignores SIGTERM is killed when it is over.
func TestRunKillsAChildThatIgnoresSIGTERM(t *testing.T) {
	const name = "job/stubborn"
	stdout, _, code := startRun(runArgs(t, "--ttl", "300ms", "--grace", "300ms", name,
		"--", "sh", "-c", "trap '' TERM; echo started; while :; do sleep 0.05; done"))
	waitFor(t, 5*time.Second, "the child to start", func() bool { return strings.Contains(stdout.String(), "started") })
	if err := testClient(t).Del(testCtx(t), keysFor(testPrefix(t), name).Lock).Err(); err != nil {
		t.Fatal(err)
	}
	if got := await(t, code, 10*time.Second); got != exitLost {
		t.Errorf("code %d, want %d (the lease was lost; the child killed after the grace period)", got, exitLost)
	}
}

// TestRunWaitsForTheLock holds the lock while run starts: run waits, and
// runs the child with a higher fence once the lock is released.
func TestRunWaitsForTheLock(t *testing.T) {
	const name = "job/wait"
	ctx := testCtx(t)
	held, err := dlockClient(t, testPrefix(t)).Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := startRun(runArgs(t, name, "--", "sh", "-c", `echo "fence=$DLOCK_FENCE name=$DLOCK_NAME"`))
	waitFor(t, 5*time.Second, "run to wait", func() bool { return strings.Contains(stderr.String(), "waiting") })
	time.Sleep(50 * time.Millisecond)
	if stdout.String() != "" {
		t.Fatalf("the child ran while the lock was held: %q", stdout)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if got := await(t, code, 5*time.Second); got != exitOK {
		t.Fatalf("code %d, want 0; stderr:\n%s", got, stderr)
	}
	m := fenceLine.FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("child output %q: no fence", stdout)
	}
	if f, _ := strconv.ParseInt(m[1], 10, 64); f <= held.Fence() {
		t.Errorf("child output %q: want a fence above the previous holder's %d", stdout, held.Fence())
	}
}

// TestRunInterruptedWhileWaiting sends this process SIGINT (Ctrl-C) while
// run waits: it gives up at once, without running the child.
func TestRunInterruptedWhileWaiting(t *testing.T) {
	const name = "job/interrupt"
	ctx := testCtx(t)
	held, err := dlockClient(t, testPrefix(t)).Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)
	stdout, stderr, code := startRun(runArgs(t, name, "--", "echo", "ran"))
	// run has installed its signal handler before it says it waits.
	waitFor(t, 5*time.Second, "run to wait", func() bool { return strings.Contains(stderr.String(), "waiting") })
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if got := await(t, code, 5*time.Second); got != exitInterrupted {
		t.Errorf("code %d, want %d", got, exitInterrupted)
	}
	if stdout.String() != "" {
		t.Errorf("the child ran: %q", stdout)
	}
	if err := held.Err(); err != nil {
		t.Errorf("the holder's lease ended: %v", err)
	}
}
