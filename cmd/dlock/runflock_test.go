//go:build unix

package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// TestRunFlockSpellings runs commands under flock's and etcdctl's
// spellings, NAME before and after the flags: -c goes through /bin/sh -c
// (its $0 is the shell, its variables expand there), -w takes seconds,
// -s and -x take an RWMutex's sides, and the old long forms still work.
func TestRunFlockSpellings(t *testing.T) {
	const name = "job/flock"
	show := `echo "fence=$DLOCK_FENCE name=$DLOCK_NAME"; X=shell; echo "$0 $X"`
	for _, args := range [][]string{
		{"-w", "10", "-E", "3", name, "-c", show},
		{name, "-w", "1.5", "-c", show},
		{"-c", show, "-w", "10s", name},
		{"--wait", "10", name, "--command", show},
		{name, "-x", "-c", show},
		{"-s", name, "-c", show},
		{"--exclusive", "--wait", "10m", name, "--", "/bin/sh", "-c", show},
		{"--shared", "--conflict-exit-code", "3", name, "--", "/bin/sh", "-c", show},
		{"-n", name, "--", "/bin/sh", "-c", show},
	} {
		r := runCLI(runArgs(t, args...)...)
		m := fenceLine.FindStringSubmatch(r.stdout)
		if r.code != exitOK || m == nil || m[2] != name || !strings.HasSuffix(r.stdout, "\n/bin/sh shell\n") {
			t.Errorf("%q: code %d, stdout %q, stderr %q; want 0, the child's fence, and $0 /bin/sh with $X expanded by the shell",
				args, r.code, r.stdout, r.stderr)
		}
	}

	// -E and -w on a busy lock: the conflict status, after the wait
	ctx := testCtx(t)
	held, err := dlockClient(t, testPrefix(t)).Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)
	if r := runCLI(runArgs(t, "-n", "-E", "3", name, "-c", "echo ran")...); r.code != 3 || r.stdout != "" {
		t.Errorf("-n -E 3 on a busy lock: code %d, stdout %q; want 3 and nothing run", r.code, r.stdout)
	}
	start := time.Now()
	if r := runCLI(runArgs(t, name, "-w", "0.3", "-E", "4", "--", "echo", "ran")...); r.code != 4 || r.stdout != "" {
		t.Errorf("-w 0.3 -E 4 on a busy lock: code %d, stdout %q; want 4", r.code, r.stdout)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("-w 0.3 gave up after %v", d)
	}
}

// event is one line of run --json.
type event struct {
	Event   string   `json:"event"`
	At      string   `json:"at"`
	Name    string   `json:"name"`
	Fence   int64    `json:"fence"`
	TTLMs   *int64   `json:"ttl_ms"`
	WaitMs  *int64   `json:"wait_ms"`
	Status  *int     `json:"status"`
	Signal  string   `json:"signal"`
	Error   string   `json:"error"`
	Command []string `json:"command"`
	Holder  *struct {
		Label string `json:"label"`
		Fence int64  `json:"fence"`
		Owner *struct {
			PID int `json:"pid"`
		} `json:"owner"`
	} `json:"holder"`
}

// parseEvents parses run --json's stderr: every line must be an event.
func parseEvents(t *testing.T, stderr string) []event {
	t.Helper()
	var evs []event
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		var e event
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.Event == "" || e.At == "" {
			t.Fatalf("stderr line %q is not an event (%v); stderr:\n%s", line, err, stderr)
		}
		evs = append(evs, e)
	}
	return evs
}

// names lists the events' names but renewed, and how many renewed
// events came, all between acquired and the first of exit, signal,
// released; a renewed event elsewhere fails the test.
func names(t *testing.T, evs []event) (order []string, renewed int) {
	t.Helper()
	holding := false
	for _, e := range evs {
		switch e.Event {
		case eventAcquired:
			holding = true
		case eventReleased, eventLost: // (after CMD's exit or a signal the lock is held, and renewed, until released)
			holding = false
		case eventRenewed:
			if !holding {
				t.Errorf("a renewed event outside the hold: %+v", evs)
			}
			renewed++
			continue
		}
		order = append(order, e.Event)
	}
	return order, renewed
}

// TestRunJSONEvents: run --json tells on stderr, one JSON object a line,
// that it took the lock (the fence the child sees), started the child,
// renewed the lease, saw the child exit, and released the lock; a busy
// run, that it waits, then the conflict.
func TestRunJSONEvents(t *testing.T) {
	const name = "job/json"
	// (startRun's buffers: the child writes to them beside run)
	stdout, stderr, code := startRun(runArgs(t, "--json", "--ttl", "300ms", name, "-c", `echo "fence=$DLOCK_FENCE name=$DLOCK_NAME"; sleep 0.5; exit 3`))
	r := result{await(t, code, 20*time.Second), stdout.String(), stderr.String()}
	m := fenceLine.FindStringSubmatch(r.stdout)
	if r.code != 3 || m == nil {
		t.Fatalf("code %d, stdout %q, stderr %q; want the child's status 3 and its fence", r.code, r.stdout, r.stderr)
	}
	fence, _ := strconv.ParseInt(m[1], 10, 64)
	evs := parseEvents(t, r.stderr)
	order, renewed := names(t, evs)
	if got, want := strings.Join(order, " "), "acquired started exit released"; got != want || renewed == 0 {
		t.Fatalf("events %q and %d renewed, want %q and renewed ones; stderr:\n%s", got, renewed, want, r.stderr)
	}
	for _, e := range evs {
		if e.Name != name {
			t.Errorf("%s event names %q, want %q", e.Event, e.Name, name)
		}
		switch e.Event {
		case eventAcquired, eventReleased:
			if e.Fence != fence {
				t.Errorf("%s event: fence %d, want the child's DLOCK_FENCE %d", e.Event, e.Fence, fence)
			}
		case eventRenewed:
			if e.Fence != fence || e.TTLMs == nil || *e.TTLMs <= 0 || *e.TTLMs > 300 {
				t.Errorf("renewed event %+v: want fence %d and 0 < ttl_ms <= 300", e, fence)
			}
		case eventExit:
			if e.Status == nil || *e.Status != 3 {
				t.Errorf("exit event %+v: want status 3", e)
			}
		case eventStarted:
			if strings.Join(e.Command, " ") != "/bin/sh -c "+`echo "fence=$DLOCK_FENCE name=$DLOCK_NAME"; sleep 0.5; exit 3` {
				t.Errorf("started event's command %q", e.Command)
			}
		}
	}

	// busy: waiting (with the bound), then the conflict and its status
	ctx := testCtx(t)
	held, err := dlockClient(t, testPrefix(t)).Mutex(name).Lock(ctx, dlock.WithLabel("nightly report"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)
	r = runCLI(runArgs(t, "--json", "-w", "0.2", name, "-c", "echo ran")...)
	evs = parseEvents(t, r.stderr)
	order, _ = names(t, evs)
	if got := strings.Join(order, " "); r.code != exitBusy || got != "waiting conflict" || r.stdout != "" {
		t.Fatalf("busy: code %d, events %q, stdout %q; want %d and \"waiting conflict\"", r.code, got, r.stdout, exitBusy)
	}
	if w := evs[0].WaitMs; w == nil || *w != 200 {
		t.Errorf("waiting event %+v: want wait_ms 200", evs[0])
	}
	if s := evs[1].Status; s == nil || *s != exitBusy {
		t.Errorf("conflict event %+v: want status %d", evs[1], exitBusy)
	}
	// the conflict names who holds the lock: the hold's label, its fence,
	// its Client's pid (this test's)
	if h := evs[1].Holder; h == nil || h.Label != "nightly report" || h.Fence != held.Fence() || h.Owner == nil || h.Owner.PID != os.Getpid() {
		t.Errorf("conflict event's holder %+v: want label \"nightly report\", fence %d, pid %d", h, held.Fence(), os.Getpid())
	}
	// and so does the line without --json
	r = runCLI(runArgs(t, "-n", name, "-c", "echo ran")...)
	want := `held by "nightly report" @ `
	if r.code != exitBusy || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, fmt.Sprintf("/%d", os.Getpid())) ||
		!strings.Contains(r.stderr, fmt.Sprintf("fence %d", held.Fence())) {
		t.Errorf("-n on a held lock: code %d, stderr %q; want %d, naming %s…/%d, fence %d", r.code, r.stderr, exitBusy, want, os.Getpid(), held.Fence())
	}
}

// heldLineRE matches what run without a command prints once it holds.
var heldLineRE = regexp.MustCompile(`^(\S+) fence=(\d+) ttl=(\S+)$`)

// TestRunHoldsWithoutCommand starts "dlock run --json NAME" as a process
// of its own: it prints one line with the name, fence and TTL, which is
// the lock's as the library reads it; it keeps the lock past its TTL
// (renewing it); at SIGINT it releases the lock within a second — sooner
// than the lease could expire (2 s, renewed every 667 ms) — and exits 0,
// having told acquired, renewed, signal, released on stderr.
func TestRunHoldsWithoutCommand(t *testing.T) {
	const name = "job/hold"
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, runArgs(t, "--json", "--ttl", "2s", "--label", "held from the shell", name)...)
	cmd.Env = append(os.Environ(), cliEnv+"=1")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	waited := false
	defer func() {
		if !waited {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(15 * time.Second):
		t.Fatalf("no line on stdout after 15s; stderr:\n%s", stderr.String())
	}
	m := heldLineRE.FindStringSubmatch(line)
	if m == nil || m[1] != name || m[3] != "2s" {
		t.Fatalf("stdout line %q: want %q fence=N ttl=2s", line, name)
	}
	fence, _ := strconv.ParseInt(m[2], 10, 64)
	c := dlockClient(t, testPrefix(t))
	ctx := testCtx(t)
	info, err := c.Inspect(ctx, dlock.KindMutex, name)
	if err != nil || !info.Held || info.Fence != fence || len(info.Holders) != 1 || info.Holders[0].Label != "held from the shell" {
		t.Fatalf("the lock as the library reads it: %+v, %v; want held with fence %d and the --label", info, err, fence)
	}
	// Held past its TTL: the lease is renewed, not left to expire.
	time.Sleep(2500 * time.Millisecond)
	if l, err := c.Mutex(name).TryLock(ctx); err == nil {
		l.Unlock(ctx)
		t.Fatalf("the lock was free a TTL after run took it: not renewed; stderr:\n%s", stderr.String())
	} else if !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatal(err)
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	waitFor(t, time.Second, "the lock to be free after SIGINT", func() bool {
		info, err := c.Inspect(ctx, dlock.KindMutex, name)
		return err == nil && !info.Held
	})
	t.Logf("free %v after SIGINT", time.Since(sent))
	select {
	case err := <-exited:
		waited = true
		if err != nil {
			t.Fatalf("run exited with %v, want status 0; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("run did not exit after SIGINT; stderr:\n%s", stderr.String())
	}
	evs := parseEvents(t, stderr.String())
	order, renewed := names(t, evs)
	if got := strings.Join(order, " "); got != "acquired signal released" || renewed == 0 {
		t.Errorf("events %q and %d renewed, want \"acquired signal released\" and renewed ones", got, renewed)
	}
	if evs[0].Fence != fence || evs[len(evs)-1].Fence != fence {
		t.Errorf("events %+v: want fence %d in acquired and released", evs, fence)
	}
}

// TestRunHoldLost: run without a command whose lock is deleted tells
// that the lease was lost and exits with --lost-exit-code.
func TestRunHoldLost(t *testing.T) {
	const name = "job/hold-lost"
	stdout, stderr, code := startRun(runArgs(t, "--json", "--ttl", "300ms", "--lost-exit-code", "9", name))
	waitFor(t, 10*time.Second, "run to hold the lock", func() bool { return strings.Contains(stdout.String(), "fence=") })
	if err := testClient(t).Del(testCtx(t), keysFor(testPrefix(t), name).Lock).Err(); err != nil {
		t.Fatal(err)
	}
	if got := await(t, code, 10*time.Second); got != 9 {
		t.Fatalf("code %d, want 9 (--lost-exit-code); stderr:\n%s", got, stderr)
	}
	evs := parseEvents(t, stderr.String())
	if last := evs[len(evs)-1]; last.Event != eventLost || last.Error == "" {
		t.Errorf("last event %+v, want lost with its error; stderr:\n%s", last, stderr)
	}
}
