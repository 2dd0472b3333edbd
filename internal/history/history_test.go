package history

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
)

func ev(worker string, fence, enter, exit int64) Event {
	return Event{Worker: worker, Fence: fence, Enter: enter, Exit: exit}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name   string
		events []Event
		// wantErr lists substrings the error must contain; nil means no
		// error is expected.
		wantErr    []string
		wantFences []string
	}{
		{name: "empty"},
		{name: "single", events: []Event{ev("a", 1, 10, 20)}},
		{
			name:   "disjoint",
			events: []Event{ev("a", 1, 10, 20), ev("b", 2, 30, 40), ev("a", 3, 50, 60)},
		},
		{
			name:   "touching intervals",
			events: []Event{ev("a", 1, 10, 20), ev("b", 2, 20, 30)},
		},
		{
			name:   "unsorted input",
			events: []Event{ev("c", 3, 50, 60), ev("a", 1, 10, 20), ev("b", 2, 30, 40)},
		},
		{
			name:    "overlap",
			events:  []Event{ev("a", 1, 10, 25), ev("b", 2, 20, 30)},
			wantErr: []string{"overlap", `"a"`, `"b"`},
		},
		{
			name: "overlap with a long earlier holder",
			// c overlaps a (not b), and a ends after b.
			events:  []Event{ev("a", 1, 10, 100), ev("b", 2, 10, 20), ev("c", 3, 50, 60)},
			wantErr: []string{"overlap", `"c"`},
		},
		{
			name:       "equal fences",
			events:     []Event{ev("a", 7, 10, 20), ev("b", 7, 30, 40)},
			wantErr:    []string{"duplicate fence 7", `"a"`, `"b"`},
			wantFences: []string{"duplicate fence 7"},
		},
		{
			name:       "decreasing fences",
			events:     []Event{ev("a", 5, 10, 20), ev("b", 4, 30, 40)},
			wantErr:    []string{"fence decreased", `"a"`, `"b"`},
			wantFences: []string{"fence decreased"},
		},
		{
			name:    "malformed",
			events:  []Event{ev("a", 1, 20, 10)},
			wantErr: []string{"malformed", `"a"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orig := append([]Event(nil), tt.events...)
			checkErr(t, "Check", Check(tt.events), tt.wantErr)
			checkErr(t, "CheckFences", CheckFences(tt.events), tt.wantFences)
			if !reflect.DeepEqual(orig, tt.events) {
				t.Error("input was modified")
			}
		})
	}
}

func checkErr(t *testing.T, fn string, err error, want []string) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Errorf("%s: unexpected error: %v", fn, err)
		}
		return
	}
	if err == nil {
		t.Fatalf("%s: no error, want one mentioning %q", fn, want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: error %q does not mention %q", fn, err, w)
		}
	}
}

func TestCheckFencesAllowsOverlap(t *testing.T) {
	events := []Event{ev("a", 1, 10, 100), ev("b", 2, 20, 30)}
	if err := CheckFences(events); err != nil {
		t.Fatal(err)
	}
	if err := Check(events); err == nil {
		t.Fatal("Check accepted overlapping intervals")
	}
}

func TestCheckLimitsReport(t *testing.T) {
	var events []Event
	for i := 0; i < 50; i++ {
		events = append(events, ev("w", 1, int64(i), int64(i)+10))
	}
	err := Check(events)
	if err == nil || !strings.Contains(err.Error(), "more violations") {
		t.Fatalf("error not truncated: %v", err)
	}
}

func TestRecorder(t *testing.T) {
	var r Recorder
	var mu sync.Mutex // the "lock" under test
	var wg sync.WaitGroup
	var fence int64
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				mu.Lock()
				fence++
				exit := r.Enter(fmt.Sprint("w", w), fence)
				exit()
				exit() // idempotent
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	events := r.Events()
	if len(events) != 100 {
		t.Fatalf("got %d events, want 100", len(events))
	}
	if err := Check(events); err != nil {
		t.Fatal(err)
	}
}

func TestRecorderOnlyCompleted(t *testing.T) {
	var r Recorder
	exit := r.Enter("a", 1)
	if n := len(r.Events()); n != 0 {
		t.Fatalf("open stay recorded: %d events", n)
	}
	exit()
	e := r.Events()
	if len(e) != 1 || e[0].Worker != "a" || e[0].Fence != 1 || e[0].Exit < e[0].Enter || e[0].Enter == 0 {
		t.Fatalf("bad event %+v", e)
	}
}

func TestWriteToReadRoundTrip(t *testing.T) {
	var r1, r2 Recorder
	r1.Enter("a", 1)()
	r1.Enter("a", 3)()
	r2.Enter("b", 2)()

	var b1, b2 bytes.Buffer
	n, err := r1.WriteTo(&b1)
	if err != nil || n != int64(b1.Len()) {
		t.Fatalf("WriteTo = %d, %v; buffer has %d bytes", n, err, b1.Len())
	}
	if got := strings.Count(b1.String(), "\n"); got != 2 {
		t.Fatalf("want 2 JSON lines, got %q", b1.String())
	}
	if !strings.Contains(b1.String(), `"w":"a"`) {
		t.Fatalf("unexpected encoding %q", b1.String())
	}
	if _, err := r2.WriteTo(&b2); err != nil {
		t.Fatal(err)
	}

	e1, err := Read(&b1)
	if err != nil {
		t.Fatal(err)
	}
	e2, err := Read(&b2)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(e1, r1.Events()) || !reflect.DeepEqual(e2, r2.Events()) {
		t.Fatalf("round trip mismatch: %v %v", e1, e2)
	}
	if merged := append(e1, e2...); len(merged) != 3 {
		t.Fatalf("merged %d events", len(merged))
	}
}

func TestReadErrors(t *testing.T) {
	if ev, err := Read(strings.NewReader("")); err != nil || len(ev) != 0 {
		t.Fatalf("empty input: %v, %v", ev, err)
	}
	if _, err := Read(strings.NewReader(`{"w":"a","f":1,"in":1,"out":2}` + "\n{bad")); err == nil {
		t.Fatal("no error for malformed input")
	}
}
