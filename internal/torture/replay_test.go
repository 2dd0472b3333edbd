//go:build unix

package torture

import (
	"bufio"
	"encoding/json"
	"os"
	"slices"
	"testing"
)

// TestCheckHistory re-checks a history file that a run kept
// (DLOCK_TORTURE_HISTORY=path) and prints its report: for looking into a
// failure without running the load again.
func TestCheckHistory(t *testing.T) {
	path := os.Getenv("DLOCK_TORTURE_HISTORY")
	if path == "" {
		t.Skip("set DLOCK_TORTURE_HISTORY to a kept history file")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var events []Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var start, stop int64
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			continue // a line cut short by a kill
		}
		switch e.K {
		case "start":
			start = e.T
		case "stop":
			stop = e.T
		}
		events = append(events, e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	h := index(events, start, stop)
	vs := h.check()
	slices.SortStableFunc(vs, func(a, b Violation) int { return cmpInt(a.T, b.T) })
	res := &Result{Violations: vs, History: path, Start: start, Stop: stop, Events: len(events), Summary: h.summary(), h: h}
	t.Log(res.Summary)
	if len(vs) > 0 {
		t.Errorf("%s", res.Report(12))
	}
}
