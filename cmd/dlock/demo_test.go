package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/history"
)

// okVerdict matches the verdict of a demo of 2 workers doing 3 rounds each.
var okVerdict = regexp.MustCompile(`(?m)^verdict: OK — 6 acquisitions by 2 processes \(\d+ handoffs\), ` +
	`fences (\d+)\.\.(\d+) strictly increasing, no overlapping critical sections, counter 6/6, ` +
	`lost lease signalled before the next owner got it, stale write fenced off$`)

// checkDemo asserts that a demo run passed and showed what it should, and
// returns the first and last fence of its contention part.
func checkDemo(t *testing.T, r result, server string) (first, last int64) {
	t.Helper()
	if r.code != exitOK {
		t.Fatalf("demo exit code %d, want 0\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "server: "+server) {
		t.Errorf("demo does not say it uses %q:\n%s", server, r.stdout)
	}
	m := okVerdict.FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("no OK verdict in the output:\n%s", r.stdout)
	}
	first, _ = strconv.ParseInt(m[1], 10, 64)
	last, _ = strconv.ParseInt(m[2], 10, 64)
	if last-first != 5 {
		t.Errorf("fences %d..%d: want 6 consecutive fences", first, last)
	}
	for _, want := range []string{"acquired  fence", "released  fence", "LOST", "rejected: the resource has seen fence"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the output lacks %q:\n%s", want, r.stdout)
		}
	}
	if r.stderr != "" {
		t.Errorf("unexpected stderr:\n%s", r.stderr)
	}
	return first, last
}

// TestDemo runs the demo as a user would: no server given, so it starts a
// throwaway redis-server and worker processes (this test binary, see
// TestMain).
func TestDemo(t *testing.T) {
	t.Parallel() // its own server, prefix or miniredis; worker processes, mostly waiting
	checkDemo(t, runCLI("demo", "--workers", "2", "--rounds", "3"), "throwaway redis-server")
}

// TestDemoEmbedded runs the demo on the embedded miniredis, whose clock the
// demo advances: the safety scene needs keys to expire in real time.
func TestDemoEmbedded(t *testing.T) {
	t.Parallel() // its own server, prefix or miniredis; worker processes, mostly waiting
	checkDemo(t, runCLI("demo", "--embedded", "--workers", "2", "--rounds", "3"), "embedded miniredis")
}

// TestDemoRerun runs the demo twice against one server: the second run
// resets the counter and its fences continue above the first run's.
func TestDemoRerun(t *testing.T) {
	t.Parallel() // its own server, prefix or miniredis; worker processes, mostly waiting
	args := []string{"demo", "--redis", serverURL(), "--prefix", testPrefix(t), "--workers", "2", "--rounds", "3"}
	_, last := checkDemo(t, runCLI(args...), "redis-server ")
	first, _ := checkDemo(t, runCLI(args...), "redis-server ")
	if first <= last {
		t.Errorf("second run's fences start at %d, not above the first run's %d", first, last)
	}
}

// TestJudge checks that the verdict fails on each kind of violation.
func TestJudge(t *testing.T) {
	ms := int64(time.Millisecond)
	good := []history.Event{
		{Worker: "worker 1", Fence: 1, Enter: 0, Exit: 10 * ms},
		{Worker: "worker 2", Fence: 2, Enter: 11 * ms, Exit: 20 * ms},
	}
	scene := safetyResult{fenceA: 3, fenceB: 4, lostAt: time.Unix(1, 0), lostErr: dlock.ErrLeaseLost,
		takenAt: time.Unix(2, 0), errAtTakeover: dlock.ErrLeaseLost, acceptedB: true, rejectedA: true}
	cfg := demoConfig{workers: 2, rounds: 1}

	if v := judge(cfg, nil, good, 2, nil, scene, nil); !v.ok() {
		t.Fatalf("a correct run fails: %s", v.line())
	}
	overlap := []history.Event{good[0], {Worker: "worker 2", Fence: 2, Enter: 5 * ms, Exit: 20 * ms}}
	backwards := []history.Event{good[0], {Worker: "worker 2", Fence: 1, Enter: 11 * ms, Exit: 20 * ms}}
	late := scene
	late.errAtTakeover = nil
	stale := scene
	stale.rejectedA = false
	for _, tc := range []struct {
		name    string
		failed  []string
		events  []history.Event
		counter int64
		scene   safetyResult
		want    string
	}{
		{"overlap", nil, overlap, 2, scene, "FAIL"},
		{"fence order", nil, backwards, 2, scene, "FAIL"},
		{"lost update", nil, good, 1, scene, "counter 1/2"},
		{"missing events", nil, good[:1], 1, scene, "1 of 2 acquisitions"},
		{"worker failed", []string{"worker 2: exit status 1"}, good, 2, scene, "worker 2: exit status 1"},
		{"told late", nil, good, 2, late, "before holder A was told"},
		{"stale write", nil, good, 2, stale, "accepted the stale owner's write"},
	} {
		v := judge(cfg, tc.failed, tc.events, tc.counter, nil, tc.scene, nil)
		if v.ok() || !strings.HasPrefix(v.line(), "verdict: FAIL — ") || !strings.Contains(v.line(), tc.want) {
			t.Errorf("%s: verdict %q, want a FAIL naming %q", tc.name, v.line(), tc.want)
		}
	}
}
