// Package history records when workers hold a lock and checks the recorded
// history for violations of mutual exclusion and fencing.
//
// Workers wrap their critical section in Recorder.Enter; histories from
// several processes on the same machine can be written with
// Recorder.WriteTo, merged with Read and verified with Check. Timestamps are
// wall-clock Unix nanoseconds, so they are only comparable between processes
// that share a clock.
package history

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"
)

// maxReported bounds the number of violations listed in one error.
const maxReported = 10

// Event is one completed stay of a worker in a critical section.
type Event struct {
	// Worker identifies the lock holder.
	Worker string `json:"w"`
	// Fence is the fencing token the worker obtained with the lock.
	Fence int64 `json:"f"`
	// Enter is when the worker entered the critical section, in Unix
	// nanoseconds (wall clock).
	Enter int64 `json:"in"`
	// Exit is when the worker left the critical section, in Unix
	// nanoseconds (wall clock).
	Exit int64 `json:"out"`
}

// String formats the event for error messages.
func (e Event) String() string {
	return fmt.Sprintf("{worker %q fence %d enter %s exit %s (held %v)}",
		e.Worker, e.Fence, stamp(e.Enter), stamp(e.Exit), time.Duration(e.Exit-e.Enter))
}

// stamp formats Unix nanoseconds with full precision.
func stamp(ns int64) string {
	return time.Unix(0, ns).UTC().Format("15:04:05.000000000")
}

// Recorder collects events. It is safe for concurrent use; the zero value
// is ready to use.
type Recorder struct {
	mu     sync.Mutex
	events []Event
}

// Enter records that worker entered its critical section holding fence and
// returns the function to call when it leaves. Only completed stays are
// recorded: an event appears in Events once exit has been called. Calling
// exit more than once has no further effect.
func (r *Recorder) Enter(worker string, fence int64) (exit func()) {
	e := Event{Worker: worker, Fence: fence, Enter: time.Now().UnixNano()}
	var once sync.Once
	return func() {
		once.Do(func() {
			e.Exit = time.Now().UnixNano()
			r.mu.Lock()
			r.events = append(r.events, e)
			r.mu.Unlock()
		})
	}
}

// Events returns a copy of the events recorded so far, in the order their
// critical sections were left.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// WriteTo writes the recorded events to w as JSON lines, one event per
// line. It implements io.WriterTo.
func (r *Recorder) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	bw := bufio.NewWriter(cw)
	enc := json.NewEncoder(bw)
	for _, e := range r.Events() {
		if err := enc.Encode(e); err != nil {
			return cw.n, err
		}
	}
	err := bw.Flush()
	return cw.n, err
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

// Write implements io.Writer.
func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Read parses events written by Recorder.WriteTo. To merge the histories of
// several processes, append the results of reading each of their files.
func Read(r io.Reader) ([]Event, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var events []Event
	for {
		var e Event
		err := dec.Decode(&e)
		if errors.Is(err, io.EOF) {
			return events, nil
		}
		if err != nil {
			return events, fmt.Errorf("history: event %d: %w", len(events)+1, err)
		}
		events = append(events, e)
	}
}

// Check verifies a history: after ordering the events by entry time, no
// critical section may begin before an earlier one has ended (touching
// intervals, next.Enter == prev.Exit, are fine) and fencing tokens must
// strictly increase. The input is not modified. The error names the
// offending events.
func Check(events []Event) error {
	sorted := sortByEnter(events)
	var errs violations
	errs.addAll(checkWellFormed(sorted))
	// holder is the earlier event that ends last: an event that overlaps
	// any earlier one also overlaps it.
	var holder Event
	for i, e := range sorted {
		if i > 0 && e.Enter < holder.Exit {
			errs.add(fmt.Errorf("overlap: %v entered %v before %v left",
				e, time.Duration(holder.Exit-e.Enter), holder))
		}
		if i == 0 || e.Exit > holder.Exit {
			holder = e
		}
	}
	errs.addAll(checkOrder(sorted))
	return errs.err()
}

// CheckFences verifies only the fencing tokens: after ordering the events
// by entry time, every token must be greater than the one before it (and
// therefore unique). Use it when critical sections may legitimately overlap,
// for example because a holder was paused past its lease and the protected
// resource relies on fencing alone.
func CheckFences(events []Event) error {
	var errs violations
	errs.addAll(checkOrder(sortByEnter(events)))
	return errs.err()
}

// sortByEnter returns a copy of events ordered by entry time (ties by
// fence, for deterministic messages).
func sortByEnter(events []Event) []Event {
	sorted := slices.Clone(events)
	slices.SortStableFunc(sorted, func(a, b Event) int {
		if a.Enter != b.Enter {
			return cmp.Compare(a.Enter, b.Enter)
		}
		return cmp.Compare(a.Fence, b.Fence)
	})
	return sorted
}

// checkWellFormed reports events that end before they begin.
func checkWellFormed(sorted []Event) []error {
	var errs []error
	for _, e := range sorted {
		if e.Exit < e.Enter {
			errs = append(errs, fmt.Errorf("malformed event: %v exits before it enters", e))
		}
	}
	return errs
}

// checkOrder reports consecutive events (in entry order) whose fences do
// not strictly increase.
func checkOrder(sorted []Event) []error {
	var errs []error
	for i := 1; i < len(sorted); i++ {
		prev, next := sorted[i-1], sorted[i]
		switch {
		case next.Fence == prev.Fence:
			errs = append(errs, fmt.Errorf("duplicate fence %d: %v entered after %v", next.Fence, next, prev))
		case next.Fence < prev.Fence:
			errs = append(errs, fmt.Errorf("fence decreased: %v entered after %v", next, prev))
		}
	}
	return errs
}

// violations accumulates errors and reports at most maxReported of them.
type violations struct {
	errs  []error
	total int
}

func (v *violations) add(err error) {
	v.total++
	if len(v.errs) < maxReported {
		v.errs = append(v.errs, err)
	}
}

func (v *violations) addAll(errs []error) {
	for _, err := range errs {
		v.add(err)
	}
}

// err returns nil if nothing was added, otherwise one error listing the
// violations.
func (v *violations) err() error {
	if v.total == 0 {
		return nil
	}
	if v.total > len(v.errs) {
		v.errs = append(v.errs, fmt.Errorf("... and %d more violations", v.total-len(v.errs)))
	}
	return fmt.Errorf("history: %d violation(s):\n%w", v.total, errors.Join(v.errs...))
}
