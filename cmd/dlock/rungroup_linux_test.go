//go:build linux

package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// procInfo is what /proc/PID/stat says about a process.
type procInfo struct {
	pid, pgid int
	state     string // R, S, D, Z, ...
	comm      string
}

// readProc reads /proc/PID/stat; ok is false when there is no such
// process.
func readProc(pid int) (p procInfo, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return p, false
	}
	// "pid (comm) state ppid pgrp ...": comm may hold spaces and parens.
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return p, false
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 3 {
		return p, false
	}
	p.pid = pid
	p.comm = s[open+1 : end]
	p.state = f[0]
	p.pgid, _ = strconv.Atoi(f[2])
	return p, true
}

// dead reports whether the process has ended: gone, or a zombie (it runs
// no more; whoever adopted it reaps it).
func (p procInfo) dead() bool { return p.state == "Z" || p.state == "X" }

// processLives reports whether pid is a process that has not ended.
func processLives(pid int) bool {
	p, ok := readProc(pid)
	return ok && !p.dead()
}

// groupMembers returns the processes of process group pgid that have not
// ended.
func groupMembers(t *testing.T, pgid int) []procInfo {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var live []procInfo
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProc(pid); ok && p.pgid == pgid && !p.dead() {
			live = append(live, p)
		}
	}
	return live
}

// killGroupAtCleanup kills what is left of process group pgid when the
// test ends, so that a failing test leaves nothing running.
func killGroupAtCleanup(t *testing.T, pgid int) {
	t.Cleanup(func() {
		if len(groupMembers(t, pgid)) > 0 {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	})
}

// runProc is "dlock run" in a process of its own: this test binary as the
// CLI (see TestMain), so that it can be killed.
type runProc struct {
	cmd    *exec.Cmd
	out    string // its stdout and stderr
	exited chan struct{}
	err    error // what Wait returned, once exited is closed
}

// startRunProc starts "dlock run" with args and env added to the test's
// environment. The process is killed at the end of the test if it still
// runs.
func startRunProc(t *testing.T, env []string, args ...string) *runProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.CreateTemp(t.TempDir(), "run-*.log")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close() // the child has its own descriptor
	p := &runProc{cmd: exec.Command(exe, append([]string{"run"}, args...)...), out: out.Name(), exited: make(chan struct{})}
	p.cmd.Env = append(append(os.Environ(), cliEnv+"=1"), env...)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// output returns what the process wrote so far.
func (p *runProc) output() string {
	b, _ := os.ReadFile(p.out)
	return string(b)
}

// wait returns the process's exit status (128+n if signal n killed it),
// failing the test if it has not exited within timeout.
func (p *runProc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.exited:
	case <-timer.C:
		t.Fatalf("dlock run did not exit within %v; its output:\n%s", timeout, p.output())
	}
	return exitStatus(p.cmd, p.err)
}

// connArgs are the flags of a run process for the test's server and
// prefix.
func connArgs(t *testing.T) []string {
	return []string{"--redis", serverURL(), "--prefix", testPrefix(t)}
}

// readPIDFile waits for path to hold a pid and returns it.
func readPIDFile(t *testing.T, path string) int {
	t.Helper()
	var pid int
	waitFor(t, 10*time.Second, "the command to write its pid", func() bool {
		b, err := os.ReadFile(path)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	return pid
}

// TestRunKilledTakesItsGroupAlong kills "dlock run" with SIGKILL while its
// command, a shell, waits for two sleeps of its own: the shell and both
// sleeps must die too, and the lock becomes free when its TTL runs out.
func TestRunKilledTakesItsGroupAlong(t *testing.T) {
	const name = "job/kill9"
	pidFile := filepath.Join(t.TempDir(), "pid")
	p := startRunProc(t, nil, append(connArgs(t), "--ttl", "1s", name, "--",
		"sh", "-c", `sleep 30 & echo $$ > "$0.tmp" && mv "$0.tmp" "$0"; sleep 30; wait`, pidFile)...)
	shell, ok := readProc(readPIDFile(t, pidFile))
	if !ok {
		t.Fatal("the command's shell is gone already")
	}
	pgid := shell.pgid
	if pgid == syscall.Getpgrp() || pgid == p.cmd.Process.Pid {
		t.Fatalf("the command runs in process group %d, not one of its own", pgid)
	}
	killGroupAtCleanup(t, pgid)
	waitFor(t, 10*time.Second, "both sleeps to run in the command's group", func() bool {
		n := 0
		for _, m := range groupMembers(t, pgid) {
			if m.comm == "sleep" {
				n++
			}
		}
		return n == 2
	})
	before := groupMembers(t, pgid)

	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 10*time.Second); code != 128+int(syscall.SIGKILL) {
		t.Fatalf("dlock run exited with %d, want %d (killed)", code, 128+int(syscall.SIGKILL))
	}
	deadline := time.Now().Add(10 * time.Second)
	for live := groupMembers(t, pgid); len(live) > 0; live = groupMembers(t, pgid) {
		if time.Now().After(deadline) {
			t.Fatalf("10s after dlock run was killed, its command's group still has %+v (it had %+v)", live, before)
		}
		time.Sleep(10 * time.Millisecond)
	}
	k := keysFor(testPrefix(t), name).Lock
	waitFor(t, 5*time.Second, "the lock to expire", func() bool {
		n, err := testClient(t).Exists(testCtx(t), k).Result()
		return err == nil && n == 0
	})
}

// TestRunGuardKilled kills the guard that leads the command's process
// group (as the OOM killer might): the command dies with it (Pdeathsig),
// run kills the rest of the group, exits 128+9 and releases the lock.
func TestRunGuardKilled(t *testing.T) {
	const name = "job/guard-killed"
	pidFile := filepath.Join(t.TempDir(), "pid")
	_, stderr, code := startRun(runArgs(t, name, "--",
		"sh", "-c", `sleep 30 & echo $$ > "$0.tmp" && mv "$0.tmp" "$0"; wait`, pidFile))
	shell, ok := readProc(readPIDFile(t, pidFile))
	if !ok {
		t.Fatal("the command's shell is gone already")
	}
	pgid := shell.pgid
	killGroupAtCleanup(t, pgid)
	waitFor(t, 10*time.Second, "the sleep to run", func() bool { return len(groupMembers(t, pgid)) == 3 })
	if err := syscall.Kill(pgid, syscall.SIGKILL); err != nil { // the guard: the group's leader
		t.Fatal(err)
	}
	if got := await(t, code, 10*time.Second); got != 128+int(syscall.SIGKILL) {
		t.Errorf("code %d, want %d; stderr:\n%s", got, 128+int(syscall.SIGKILL), stderr)
	}
	waitFor(t, 10*time.Second, "the group to be gone", func() bool { return len(groupMembers(t, pgid)) == 0 })
	n, err := testClient(t).Exists(testCtx(t), keysFor(testPrefix(t), name).Lock).Result()
	if err != nil || n != 0 {
		t.Errorf("the lock is still held after run exited (exists %d, %v)", n, err)
	}
}

// TestRunKillsWhatTheCommandLeftBehind: when the command exits, a process
// it left running in the background is killed before the lock is
// released.
func TestRunKillsWhatTheCommandLeftBehind(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	r := runCLI(runArgs(t, "--quiet", "job/straggler", "--",
		"sh", "-c", `sleep 30 & echo $! > "$0"`, pidFile)...)
	if r.code != exitOK {
		t.Fatalf("code %d, want 0; stderr %q", r.code, r.stderr)
	}
	pid := readPIDFile(t, pidFile)
	t.Cleanup(func() {
		if processLives(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	// SIGKILL was sent before run returned; the kernel finishes it off.
	waitFor(t, 10*time.Second, "the background sleep to be gone", func() bool { return !processLives(pid) })
}

// TestRunHistoryNeverOverlaps runs commands under one lock from separate
// "dlock run" processes that contend for it, kills one of them with
// SIGKILL while its command runs, and checks the history that the commands
// wrote to one file (appends, so the file's order is the order of the
// writes): no command starts before the previous one ended or, for the
// killed one, before its process group was seen dead; fences increase.
//
// The killed run's lock is taken again only when its TTL (2s) runs out,
// at least 2/3 of it after the kill; the test sees the group dead within
// milliseconds and records it. That margin is what keeps the check from
// accusing a correct run; a run whose group outlived it is caught.
func TestRunHistoryNeverOverlaps(t *testing.T) {
	const name = "job/history"
	hist := filepath.Join(t.TempDir(), "history")
	script := `echo "start $DLOCK_TEST_ID $$ $DLOCK_FENCE $(date +%s.%N)" >> "$0"; sleep "$DLOCK_TEST_SLEEP"; echo "end $DLOCK_TEST_ID $$" >> "$0"`
	start := func(id, sleep string) *runProc {
		return startRunProc(t, []string{"DLOCK_TEST_ID=" + id, "DLOCK_TEST_SLEEP=" + sleep},
			append(connArgs(t), "--ttl", "2s", name, "--", "sh", "-c", script, hist)...)
	}
	expectOK := func(ps []*runProc) {
		t.Helper()
		for _, p := range ps {
			if code := p.wait(t, 30*time.Second); code != exitOK {
				t.Fatalf("dlock run exited with %d, want 0; its output:\n%s", code, p.output())
			}
		}
	}
	// 4 contenders a round and 3 waiting out the killed run under
	// ./test.sh --full; 2 and 2 by default (each run's turn is about a
	// second on 2 cores with -race: the same check, about 8 s sooner)
	contenders, waiters := 2, 2
	if redistest.Full() {
		contenders, waiters = 4, 3
	}
	contend := func(round int) {
		var ps []*runProc
		for i := 0; i < contenders; i++ {
			ps = append(ps, start(fmt.Sprintf("r%d-%d", round, i), "0.2"))
		}
		expectOK(ps)
	}

	contend(1)

	victim := start("victim", "30")
	var line []string
	waitFor(t, 10*time.Second, "the victim's command to start", func() bool {
		line = findLine(t, hist, "start victim ")
		return line != nil
	})
	shPID, _ := strconv.Atoi(line[2])
	sh, ok := readProc(shPID)
	if !ok {
		t.Fatal("the victim's command is gone before the kill")
	}
	killGroupAtCleanup(t, sh.pgid)
	var waiting []*runProc
	for i := 0; i < waiters; i++ {
		p := start(fmt.Sprintf("r2-%d", i), "0.2")
		waiting = append(waiting, p)
		waitFor(t, 10*time.Second, "a run to wait for the lock", func() bool { return strings.Contains(p.output(), "waiting") })
	}
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the victim's process group to die", func() bool { return len(groupMembers(t, sh.pgid)) == 0 })
	appendLine(t, hist, "dead victim")
	if code := victim.wait(t, 10*time.Second); code != 128+int(syscall.SIGKILL) {
		t.Errorf("the victim's run exited with %d, want %d", code, 128+int(syscall.SIGKILL))
	}
	expectOK(waiting)

	contend(3)
	checkHistory(t, hist, 2*contenders+1+waiters)
}

// findLine returns the fields of the first line of path that starts with
// prefix, or nil.
func findLine(t *testing.T, path, prefix string) []string {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix) {
			return strings.Fields(sc.Text())
		}
	}
	return nil
}

// appendLine appends line to the file at path.
func appendLine(t *testing.T, path, line string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line + "\n"); err != nil {
		t.Fatal(err)
	}
}

// checkHistory checks the history file of TestRunHistoryNeverOverlaps:
// starts and ends alternate, each end or "dead" line closing the
// section that the previous start opened; fences strictly increase; there
// are starts sections in all.
func checkHistory(t *testing.T, path string, starts int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	open, n := "", 0
	var lastFence int64
	for i, line := range lines {
		f := strings.Fields(line)
		bad := func(why string) { t.Fatalf("history line %d %q: %s\nhistory:\n%s", i+1, line, why, b) }
		switch {
		case len(f) == 5 && f[0] == "start":
			if open != "" {
				bad("starts while " + open + " holds the lock")
			}
			fence, err := strconv.ParseInt(f[3], 10, 64)
			if err != nil || fence <= lastFence {
				bad(fmt.Sprintf("fence %q after %d: want it to increase", f[3], lastFence))
			}
			open, lastFence = f[1], fence
			n++
		case len(f) == 3 && f[0] == "end", len(f) == 2 && f[0] == "dead":
			if f[1] != open {
				bad(fmt.Sprintf("ends %s's section, but the open one is %q", f[1], open))
			}
			open = ""
		default:
			bad("cannot parse")
		}
	}
	if open != "" || n != starts {
		t.Fatalf("%d sections, the last one (%q) open; want %d, all closed\nhistory:\n%s", n, open, starts, b)
	}
	if findLine(t, path, "end victim ") != nil {
		t.Errorf("the killed run's command wrote its end line: it outlived the kill\nhistory:\n%s", b)
	}
}
