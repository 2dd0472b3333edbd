package main

import (
	"fmt"
	"io"
	"slices"
	"sync"
	"time"
)

// Timing of the show's reordering.
const (
	// showHoldBack is how long an event waits before it is printed, so
	// that events from different processes, which arrive through
	// different pipes, come out in the order they happened. A handoff
	// takes at least a Redis round trip, and every line is stamped by the
	// process that saw the event, so a short window suffices.
	showHoldBack = 40 * time.Millisecond
	showTick     = 10 * time.Millisecond
)

// show prints the demo's events as they come, ordered by when they
// happened (stamped by the process that saw them, on the wall clock that
// all processes on this machine share), each with the time since the demo
// started. It is safe for concurrent use.
type show struct {
	w     io.Writer
	start time.Time

	mu      sync.Mutex
	pending []showLine
	seq     int // arrival order, to keep equal stamps stable

	quit chan struct{}
	done chan struct{}
}

// showLine is one event waiting to be printed.
type showLine struct {
	at        time.Time
	seq       int
	who, what string
}

// newShow starts a show on w whose clock starts at start. Close it to
// print what is pending and stop its goroutine.
func newShow(w io.Writer, start time.Time) *show {
	s := &show{w: w, start: start, quit: make(chan struct{}), done: make(chan struct{})}
	go s.loop()
	return s
}

// event queues the line "who what", which happened at at.
func (s *show) event(at time.Time, who, what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	s.pending = append(s.pending, showLine{at: at, seq: s.seq, who: who, what: what})
}

// println prints text on a line of its own after every event queued so
// far: it marks the boundary between two parts of the demo.
func (s *show) println(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushLocked(time.Time{})
	fmt.Fprintln(s.w, text)
}

// loop prints the events that have waited showHoldBack, until close.
func (s *show) loop() {
	defer close(s.done)
	t := time.NewTicker(showTick)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case now := <-t.C:
			s.mu.Lock()
			s.flushLocked(now.Add(-showHoldBack))
			s.mu.Unlock()
		}
	}
}

// flushLocked prints, in order, the pending events that happened before
// upTo, or all of them when upTo is zero. Call it with s.mu held.
func (s *show) flushLocked(upTo time.Time) {
	slices.SortFunc(s.pending, func(a, b showLine) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.seq - b.seq
	})
	n := 0
	for n < len(s.pending) && (upTo.IsZero() || s.pending[n].at.Before(upTo)) {
		l := s.pending[n]
		fmt.Fprintf(s.w, "%8.3fs  %-9s  %s\n", l.at.Sub(s.start).Seconds(), l.who, l.what)
		n++
	}
	s.pending = slices.Delete(s.pending, 0, n)
}

// close prints every pending event and stops the show's goroutine. The
// show may still print lines with println afterwards.
func (s *show) close() {
	close(s.quit)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushLocked(time.Time{})
}

// lockEvent formats what a holder did with the lock, aligned in columns:
// "acquired  fence 7     waited 41ms".
func lockEvent(what string, fence int64, detail string) string {
	return fmt.Sprintf("%-9s fence %-5d %s", what, fence, detail)
}
