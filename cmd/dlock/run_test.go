//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// helperArgv is the command line of a helperFamily command logging to
// logPath, for "dlock run ... -- argv".
func helperArgv(t *testing.T, logPath string) []string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return []string{"env", helperEnv + "=" + helperFamily, exe, logPath}
}

// familyLog is what a helper family logged.
type familyLog struct {
	ready map[int]int      // pid -> pgid
	got   map[int][]string // pid -> signals, in order
}

// readFamilyLog parses the log of a helper family.
func readFamilyLog(t *testing.T, path string) familyLog {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	l := familyLog{ready: map[int]int{}, got: map[int][]string{}}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "ready":
			pid, _ := strconv.Atoi(f[1])
			pgid, _ := strconv.Atoi(f[2])
			l.ready[pid] = pgid
		case len(f) == 2:
			pid, _ := strconv.Atoi(f[0])
			l.got[pid] = append(l.got[pid], f[1])
		}
	}
	return l
}

// awaitFamily waits until both members of a helper family are ready and
// returns their pids. It checks that they share a process group that is
// not the test's.
func awaitFamily(t *testing.T, logPath string) []int {
	t.Helper()
	waitFor(t, 10*time.Second, "the command and its child to be ready", func() bool {
		return len(readFamilyLog(t, logPath).ready) == 2
	})
	l := readFamilyLog(t, logPath)
	var pids []int
	pgids := map[int]bool{}
	for pid, pgid := range l.ready {
		pids = append(pids, pid)
		pgids[pgid] = true
	}
	if len(pgids) != 1 || pgids[syscall.Getpgrp()] {
		t.Fatalf("process groups %v: want one, of the command's own (the test's is %d)", pgids, syscall.Getpgrp())
	}
	return pids
}

// awaitSignal waits until every pid has logged sig.
func awaitSignal(t *testing.T, logPath string, pids []int, sig string) {
	t.Helper()
	waitFor(t, 10*time.Second, "every process of the group to get "+sig, func() bool {
		l := readFamilyLog(t, logPath)
		for _, pid := range pids {
			if !slices.Contains(l.got[pid], sig) {
				return false
			}
		}
		return true
	})
}

// TestRunSignalsTheWholeGroupOnLeaseLoss deletes the lock while a command
// with a child runs: both get SIGTERM (not only the command), and run
// exits with the lost lease's status, saying the command's.
func TestRunSignalsTheWholeGroupOnLeaseLoss(t *testing.T) {
	const name = "job/lost-group"
	logPath := filepath.Join(t.TempDir(), "signals")
	_, stderr, code := startRun(append(runArgs(t, "--ttl", "600ms", "--grace", "10s", name, "--"),
		helperArgv(t, logPath)...))
	pids := awaitFamily(t, logPath)
	if err := testClient(t).Del(testCtx(t), keysFor(testPrefix(t), name).Lock).Err(); err != nil {
		t.Fatal(err)
	}
	awaitSignal(t, logPath, pids, "TERM")
	if got := await(t, code, 10*time.Second); got != exitLost || !strings.Contains(stderr.String(), fmt.Sprintf("exited with status %d", helperStatus)) {
		t.Errorf("code %d, want %d (the lease was lost) and the command's own status %d said; stderr:\n%s", got, exitLost, helperStatus, stderr)
	}
	if !strings.Contains(stderr.String(), "SIGTERM to its process group") {
		t.Errorf("stderr does not say the group was stopped:\n%s", stderr)
	}
}

// TestRunWakesAStoppedGroup stops the command and its child (SIGSTOP),
// then deletes the lock: run's SIGTERM is followed by SIGCONT, so both act
// on it at once rather than being killed when the grace period is over.
func TestRunWakesAStoppedGroup(t *testing.T) {
	const name = "job/stopped"
	logPath := filepath.Join(t.TempDir(), "signals")
	_, stderr, code := startRun(append(runArgs(t, "--ttl", "600ms", "--grace", "20s", name, "--"),
		helperArgv(t, logPath)...))
	pids := awaitFamily(t, logPath)
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	if err := testClient(t).Del(testCtx(t), keysFor(testPrefix(t), name).Lock).Err(); err != nil {
		t.Fatal(err)
	}
	awaitSignal(t, logPath, pids, "TERM")
	if got := await(t, code, 10*time.Second); got != exitLost || !strings.Contains(stderr.String(), fmt.Sprintf("exited with status %d", helperStatus)) {
		t.Errorf("code %d, want %d (the lease was lost) and the command's own status %d said; stderr:\n%s", got, exitLost, helperStatus, stderr)
	}
}

// TestRunPassesSignalsToTheGroup sends this process (where run runs)
// SIGUSR1, then SIGHUP: both reach the command and its child, run survives
// SIGHUP, exits once the command has with its status, and releases the
// lock.
func TestRunPassesSignalsToTheGroup(t *testing.T) {
	const name = "job/hup"
	logPath := filepath.Join(t.TempDir(), "signals")
	_, stderr, code := startRun(append(runArgs(t, name, "--"), helperArgv(t, logPath)...))
	pids := awaitFamily(t, logPath)

	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	awaitSignal(t, logPath, pids, "USR1")
	select {
	case c := <-code:
		t.Fatalf("run exited with %d after SIGUSR1; it should only pass it on", c)
	default:
	}

	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	awaitSignal(t, logPath, pids, "HUP")
	if got := await(t, code, 10*time.Second); got != helperStatus {
		t.Errorf("code %d, want %d (the command's status); stderr:\n%s", got, helperStatus, stderr)
	}
	n, err := testClient(t).Exists(testCtx(t), keysFor(testPrefix(t), name).Lock).Result()
	if err != nil || n != 0 {
		t.Errorf("the lock is still held after run exited (exists %d, %v)", n, err)
	}
}

// TestRunRefusesWordsAfterName: words between NAME and "--", and a
// command line without NAME, are refused with status 2 before any lock is
// taken — even when the server is unreachable, which shows it is not
// contacted. (Flags may come after NAME: TestParseRun.)
func TestRunRefusesWordsAfterName(t *testing.T) {
	const name = "job/refused"
	for _, tc := range []struct {
		after []string
		want  string
	}{
		{[]string{"echo", "hi"}, `want "--" between NAME and the command`},
		{[]string{"--bogus", "--", "echo"}, "unknown flag --bogus"},
		{[]string{"--"}, "missing the command"},
		{[]string{"-c", "echo hi", "--", "echo"}, `-c CMD and "-- CMD"`},
		{[]string{"-w", "soon"}, "--wait soon: not a time to wait"},
	} {
		for _, url := range []string{serverURL(), "redis://127.0.0.1:1"} {
			args := append([]string{"run", "--redis", url, "--prefix", testPrefix(t), name}, tc.after...)
			r := runCLI(args...)
			if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
				t.Errorf("%q: code %d, stdout %q, stderr %q; want %d and %q", args, r.code, r.stdout, r.stderr, exitUsage, tc.want)
			}
		}
	}
	k := keysFor(testPrefix(t), name)
	n, err := testClient(t).Exists(testCtx(t), k.Lock, k.Fence).Result()
	if err != nil || n != 0 {
		t.Errorf("the lock or its fence counter exists (%d keys, %v): a lock was taken", n, err)
	}
}

// TestRunBusy holds the lock: -n gives up at once and --wait after its
// time, both with the conflict status, without running the command.
func TestRunBusy(t *testing.T) {
	const name = "job/busy"
	ctx := testCtx(t)
	held, err := dlockClient(t, testPrefix(t)).Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)

	r := runCLI(runArgs(t, "-n", name, "--", "echo", "ran")...)
	if r.code != exitBusy || r.stdout != "" || !strings.Contains(r.stderr, fmt.Sprintf("held by %s/%d, fence %d", hostname(), os.Getpid(), held.Fence())) {
		t.Errorf("-n: code %d, stdout %q, stderr %q; want %d, no output from the command", r.code, r.stdout, r.stderr, exitBusy)
	}
	r = runCLI(runArgs(t, "--no-wait", "--conflict-exit-code", "9", name, "--", "echo", "ran")...)
	if r.code != 9 || r.stdout != "" {
		t.Errorf("--no-wait --conflict-exit-code 9: code %d, stdout %q; want 9", r.code, r.stdout)
	}
	start := time.Now()
	r = runCLI(runArgs(t, "--wait", "200ms", name, "--", "echo", "ran")...)
	if r.code != exitBusy || r.stdout != "" || !strings.Contains(r.stderr, "gave up waiting") {
		t.Errorf("--wait 200ms: code %d, stdout %q, stderr %q; want %d", r.code, r.stdout, r.stderr, exitBusy)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("--wait 200ms gave up after %v", d)
	}
	if err := held.Err(); err != nil {
		t.Errorf("the holder's lease ended: %v", err)
	}
}

// TestRunWaitSucceeds: --wait that is long enough gets the lock once it
// is released.
func TestRunWaitSucceeds(t *testing.T) {
	const name = "job/wait-ok"
	ctx := testCtx(t)
	held, err := dlockClient(t, testPrefix(t)).Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := startRun(runArgs(t, "--wait", "20s", name, "--", "echo", "ran"))
	waitFor(t, 5*time.Second, "run to wait", func() bool { return strings.Contains(stderr.String(), "waiting up to 20s") })
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if got := await(t, code, 10*time.Second); got != exitOK || stdout.String() != "ran\n" {
		t.Errorf("code %d, stdout %q; want 0 and the command's output; stderr:\n%s", got, stdout, stderr)
	}
}

// TestRunRedisURLFromEnvironment: without --redis, run, inspect and ls use
// $DLOCK_REDIS_URL; --redis wins over it.
func TestRunRedisURLFromEnvironment(t *testing.T) {
	const name = "job/env"
	t.Setenv(redisURLEnv, serverURL())
	r := runCLI("run", "--prefix", testPrefix(t), name, "--", "sh", "-c", `echo "fence=$DLOCK_FENCE name=$DLOCK_NAME"`)
	m := fenceLine.FindStringSubmatch(r.stdout)
	if r.code != exitOK || m == nil {
		t.Fatalf("run with $%s: code %d, stdout %q, stderr %q", redisURLEnv, r.code, r.stdout, r.stderr)
	}
	// the fence came from the server the URL names (a released lock
	// leaves only the shared counter)
	if f, err := testClient(t).Get(testCtx(t), keysFor(testPrefix(t), name).Fence).Result(); err != nil || f != m[1] {
		t.Errorf("the fence counter of the URL's server is %q (%v), want the run's fence %s", f, err, m[1])
	}
	if r := runCLI("inspect", "--prefix", testPrefix(t), name); r.code != exitOK || !strings.Contains(r.stdout, "no lock called") {
		t.Errorf("inspect with $%s: code %d, stdout %q, stderr %q", redisURLEnv, r.code, r.stdout, r.stderr)
	}
	if r := runCLI("ls", "--prefix", testPrefix(t)); r.code != exitOK || !strings.Contains(r.stdout, "no locks under prefix") {
		t.Errorf("ls with $%s: code %d, stdout %q, stderr %q", redisURLEnv, r.code, r.stdout, r.stderr)
	}

	t.Setenv(redisURLEnv, "redis://:secret@127.0.0.1:1")
	r = runCLI("run", "--redis", serverURL(), "--prefix", testPrefix(t), name, "--", "true")
	if r.code != exitOK {
		t.Errorf("--redis did not win over $%s: code %d, stderr %q", redisURLEnv, r.code, r.stderr)
	}
	r = runCLI("run", "--prefix", testPrefix(t), name, "--", "true")
	if r.code != exitFail || !strings.Contains(r.stderr, "cannot reach Redis at 127.0.0.1:1") || strings.Contains(r.stderr, "secret") {
		t.Errorf("unreachable $%s: code %d, stderr %q; want 1, the address and no password", redisURLEnv, r.code, r.stderr)
	}
	t.Setenv(redisURLEnv, "http://:secret@host")
	r = runCLI("run", "--prefix", testPrefix(t), name, "--", "true")
	if r.code != exitUsage || strings.Contains(r.stderr, "secret") {
		t.Errorf("bad $%s: code %d, stderr %q; want 2 and no password", redisURLEnv, r.code, r.stderr)
	}
}

// TestGuardRefusesStrayCalls starts the hidden guard command the way a
// user might, in a process group of its own (so that a guard that did not
// refuse would kill only that group): not as a group leader, and without
// its pipes. It must refuse both, and so run nothing.
func TestGuardRefusesStrayCalls(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	r1, w1, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close()
	defer w1.Close()
	r2, w2, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	defer w2.Close()
	for _, tc := range []struct {
		what  string
		cmd   *exec.Cmd
		files []*os.File
	}{
		// sh leads the group; the guard is its child, not a leader.
		{"not a group leader", exec.Command("sh", "-c", `"$0" `+guardCommand+` -- touch "$1"`, exe, marker), []*os.File{r1, w2}},
		{"no pipes", exec.Command(exe, guardCommand, "--", "touch", marker), nil},
	} {
		tc.cmd.ExtraFiles = tc.files
		tc.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out, err := tc.cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitUsage {
			t.Errorf("%s: %v, want exit status %d; output %q", tc.what, err, exitUsage, out)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("%s: the guard ran the command", tc.what)
		}
	}
}

// On a server that may evict keys, run refuses with the flag that accepts
// the risk named, and runs with it.
func TestRunEvictionRisk(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{Args: []string{"--maxmemory-policy", "allkeys-lru"}})
	url := "redis://" + s.Addr()
	r := runCLI("run", "--redis", url, "job/evict", "--", "true")
	if r.code != exitFail || !strings.Contains(r.stderr, "--eviction-risk") || !strings.Contains(r.stderr, "allkeys-lru") {
		t.Fatalf("on allkeys-lru: code %d, stderr %q; want %d and the --eviction-risk hint", r.code, r.stderr, exitFail)
	}
	if r := runCLI("run", "--redis", url, "job/evict", "--eviction-risk", "--", "true"); r.code != exitOK {
		t.Fatalf("--eviction-risk: code %d, stderr %q", r.code, r.stderr)
	}
}

// Flags after the positional arguments, as users type them.
func TestFlagsAfterNames(t *testing.T) {
	prefix := testPrefix(t)
	if r := runCLI("run", "job/late-flags", "--prefix", prefix, "--redis", serverURL(), "-n", "--", "true"); r.code != exitOK {
		t.Fatalf("run NAME --prefix P -n -- true: code %d, stderr %q", r.code, r.stderr)
	}
	t.Setenv(redisURLEnv, serverURL())
	if r := runCLI("inspect", "job/late-flags", "--prefix", prefix, "--json"); r.code != exitOK || strings.TrimSpace(r.stdout) != "[]" {
		t.Fatalf("inspect NAME --json: code %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := runCLI("ls", "job*", "--json", "--prefix", prefix); r.code != exitOK || strings.TrimSpace(r.stdout) != "[]" {
		t.Fatalf("ls PATTERN --json: code %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// one short error, the synopsis, and where the flags are listed
	r := runCLI("ls", "--bogus")
	if r.code != exitUsage || strings.Count(r.stderr, "\n") > 3 || !strings.Contains(r.stderr, "unknown flag --bogus") ||
		!strings.Contains(r.stderr, "dlock ls -h") {
		t.Fatalf("an unknown flag: code %d, stderr %q", r.code, r.stderr)
	}
	if r := runCLI("top", "--interval", "2"); r.code != exitUsage || !strings.Contains(r.stderr, "give a unit") {
		t.Fatalf("a duration without a unit: code %d, stderr %q", r.code, r.stderr)
	}
}

// run --max-hold: a command that runs on is stopped when the max hold runs
// out, and run exits with the lost lease's status, saying why.
func TestRunMaxHold(t *testing.T) {
	const name = "job/max-hold"
	// 2s, not 500ms: under -race on a loaded 2-core machine the SIGTERM
	// came before sh had echoed (the child never seen to start: 2 of 3 of
	// go test -race -count=3 beside another package's tests), as in
	// TestRunMaxHoldStopsCMDBeforeTheLockIsFree (a8267e8)
	// --ttl 1s, not 100ms: renewed every 33 ms, a lease of 100 ms was
	// lost on a loaded machine before CMD started (still "timed out
	// waiting for the child to start", once in ./test.sh with -p 4)
	stdout, stderr, code := startRun(runArgs(t, "--ttl", "1s", "--max-hold", "2s", "--grace", "2s", name,
		"--", "sh", "-c", "echo started; exec sleep 30"))
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(stdout.String(), "started"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the child did not start within 10s; stderr:\n%s", stderr)
		}
	}
	if got := await(t, code, 10*time.Second); got != exitLost {
		t.Errorf("code %d, want %d; stderr:\n%s", got, exitLost, stderr)
	}
	if !strings.Contains(stderr.String(), "max hold") {
		t.Errorf("stderr does not say the max hold ran out:\n%s", stderr)
	}
	if r := runCLI(runArgs(t, "--lost-exit-code", "300", name, "--", "true")...); r.code != exitUsage {
		t.Errorf("--lost-exit-code 300: code %d", r.code)
	}
}

// run --shared holds the read side of an RWMutex (many at once, as flock
// -s), --exclusive its write side, --permits N one of N permits: two
// holders at once, and a third -n finds it busy.
func TestRunSharedAndPermits(t *testing.T) {
	for _, tc := range []struct {
		name     string
		together []string // two runs that hold at once
		excluded []string // a third that -n finds busy meanwhile
	}{
		{"shared", []string{"--shared"}, []string{"--exclusive"}},
		{"permits", []string{"--permits", "2"}, []string{"--permits", "2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "job/" + tc.name
			release := filepath.Join(t.TempDir(), "release")
			hold := []string{"--", "sh", "-c", "echo started; while [ ! -e " + release + " ]; do sleep 0.02; done"}
			var outs []*syncBuffer
			var codes []<-chan int
			for range 2 {
				stdout, _, code := startRun(runArgs(t, append(append(tc.together, name), hold...)...))
				outs, codes = append(outs, stdout), append(codes, code)
			}
			for _, o := range outs {
				waitFor(t, 5*time.Second, "both holders to start", func() bool { return strings.Contains(o.String(), "started") })
			}
			r := runCLI(runArgs(t, append(append(append([]string{"-n"}, tc.excluded...), name), "--", "true")...)...)
			if r.code != exitBusy {
				t.Errorf("a third (%q) while two hold: code %d, want %d; stderr %q", tc.excluded, r.code, exitBusy, r.stderr)
			}
			if err := os.WriteFile(release, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			for _, c := range codes {
				if got := await(t, c, 10*time.Second); got != exitOK {
					t.Errorf("a holder: code %d", got)
				}
			}
		})
	}
	for _, bad := range [][]string{{"--shared", "--exclusive"}, {"--shared", "--permits", "2"}, {"--permits", "3", "--value", "v"}, {"--permits", "-1"}} {
		if r := runCLI(runArgs(t, append(bad, "job/x", "--", "true")...)...); r.code != exitUsage {
			t.Errorf("%q: code %d, want %d", bad, r.code, exitUsage)
		}
	}
}

// TestRunMaxHoldStopsCMDBeforeTheLockIsFree: two runs of one name with
// --max-hold, whose CMD takes a while to stop after SIGTERM (within
// --grace): the second CMD starts only after the first has ended, as the
// log both write (in order, O_APPEND) shows. The lock is not free while
// the first CMD runs, though its max hold has run out.
func TestRunMaxHoldStopsCMDBeforeTheLockIsFree(t *testing.T) {
	const name = "job/max-hold-overlap"
	logPath := filepath.Join(t.TempDir(), "log")
	script := `trap 'sleep 0.3; echo end $$ >> ` + logPath + `; exit 0' TERM; echo start $$ >> ` + logPath + `; ` +
		`echo started; while :; do sleep 0.02; done`
	// A max hold that a loaded machine's fork and exec of sh fit in: at
	// 400ms, under the race detector with other packages' tests beside
	// it, SIGTERM now and then came before sh had set its trap (status
	// 143, no "started": about 1 run in 6 of go test -race -count=40).
	args := runArgs(t, "--ttl", "200ms", "--max-hold", "2s", "--grace", "2s", name, "--", "sh", "-c", script)
	var codes []<-chan int
	var errs []*syncBuffer
	for i := range 2 {
		stdout, stderr, code := startRun(args)
		codes, errs = append(codes, code), append(errs, stderr)
		if i == 0 {
			deadline := time.Now().Add(15 * time.Second)
			for !strings.Contains(stdout.String(), "started") {
				if time.Now().After(deadline) {
					t.Fatalf("timed out after 15s waiting for the first CMD to start; its run's stderr:\n%s", stderr)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	for i, c := range codes {
		if got := await(t, c, 20*time.Second); got != exitLost {
			t.Errorf("run %d: code %d, want %d (the max hold ran out); stderr:\n%s", i, got, exitLost, errs[i])
		}
	}
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	var running []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		what, pid, _ := strings.Cut(line, " ")
		switch what {
		case "start":
			if len(running) > 0 {
				t.Errorf("CMD %s started while CMD %v still ran: the lock was free before the first CMD ended\nlog:\n%s", pid, running, b)
			}
			running = append(running, pid)
		case "end":
			running = slices.DeleteFunc(running, func(p string) bool { return p == pid })
		}
	}
	if n := strings.Count(string(b), "start "); n != 2 {
		t.Errorf("%d CMDs started, want 2; log:\n%s", n, b)
	}
}

// hostname is this machine's name, as an owner record says it.
func hostname() string {
	h, _ := os.Hostname()
	return h
}
