package hold

import (
	"math"
	"time"
)

// schedule is a min-heap of holds ordered by a time: the watchdog keeps
// two, one of deadlines (every hold) and one of renewals (holds it renews
// that have no renewal in flight), so that finding what is due costs
// O(log n) per hold, not a scan of all of them.
//
// A key may be earlier than the hold's real time (a change that moved it
// later does not touch the heap); it is never later. The watchdog checks
// the hold when its key comes up and puts it back with its real time.
//
// Each entry keeps its key beside its hold, so that the heap's
// comparisons read one array and never a Hold (issue 47: with 100 000
// leases, comparisons that followed a pointer to each hold missed the
// cache at every step, and were a tenth of the Client's CPU); a hold
// keeps its index in each schedule (Hold.index, at the schedule's which),
// in 32 bits (a hold per held lease).
type schedule struct {
	holds []entry
	which int // byDeadline or byRenewal: the hold's index this schedule uses
}

// entry is a hold in a schedule, at its key (mono).
type entry struct {
	at int64
	h  *Hold
}

// The schedules, as a hold's at and index know them.
const (
	byDeadline = 0
	byRenewal  = 1
)

// Monotonic clock readings in 8 bytes, not a time.Time's 24: the
// schedules' keys (two per hold) and a Hold's acquired and maxFrom (a
// hold per held lease). A reading is the nanoseconds from base, taken
// once. Every time so kept comes from time.Now (Hold's deadline and
// nextRenew, an attempt's start, a hand-off's arrival), so t.Sub(base) is
// read on the monotonic clock, as comparing the times themselves would
// be: a step of the wall clock moves none; and fromMono gives back a time
// with a monotonic reading. The zero time (a deadline reset by Extend)
// comes out as the smallest key, first: a key may be earlier than the
// hold's real time, never later (see schedule).
var base = time.Now()

// longAgo is the zero time's reading (mono saturates): before every other.
const longAgo int64 = math.MinInt64

func mono(t time.Time) int64 { return int64(t.Sub(base)) }

func fromMono(at int64) time.Time { return base.Add(time.Duration(at)) }

func newSchedule(which int) *schedule { return &schedule{which: which} }

// The heap's operations, as container/heap's, written out on entries:
// container/heap's Push and Pop take and give an interface, which would
// box each entry (an allocation per renewal, twice).

func (s *schedule) Len() int { return len(s.holds) }

func (s *schedule) less(i, j int) bool { return s.holds[i].at < s.holds[j].at }

func (s *schedule) swap(i, j int) {
	s.holds[i], s.holds[j] = s.holds[j], s.holds[i]
	s.holds[i].h.index[s.which] = int32(i)
	s.holds[j].h.index[s.which] = int32(j)
}

func (s *schedule) up(j int) {
	for {
		i := (j - 1) / 2 // parent
		if i == j || !s.less(j, i) {
			break
		}
		s.swap(i, j)
		j = i
	}
}

func (s *schedule) down(i0, n int) bool {
	i := i0
	for {
		j1 := 2*i + 1
		if j1 >= n || j1 < 0 { // j1 < 0 after int overflow
			break
		}
		j := j1 // left child
		if j2 := j1 + 1; j2 < n && s.less(j2, j1) {
			j = j2 // = 2*i + 2  // right child
		}
		if !s.less(j, i) {
			break
		}
		s.swap(i, j)
		i = j
	}
	return i > i0
}

// fix restores the heap after the entry at i changed its key.
func (s *schedule) fix(i int) {
	if !s.down(i, len(s.holds)) {
		s.up(i)
	}
}

// in reports whether h is in the schedule.
func (s *schedule) in(h *Hold) bool { return h.index[s.which] >= 0 }

// set puts h in the schedule at at (mono), or moves it there.
func (s *schedule) set(h *Hold, at int64) {
	if i := h.index[s.which]; i >= 0 {
		s.holds[i].at = at
		s.fix(int(i))
		return
	}
	h.index[s.which] = int32(len(s.holds))
	s.holds = append(s.holds, entry{at, h})
	s.up(len(s.holds) - 1)
}

// at is h's key in the schedule; h is in it.
func (s *schedule) at(h *Hold) int64 { return s.holds[h.index[s.which]].at }

// sooner moves h to t if it is in the schedule later than that, or puts
// it in at t if add is set and it is not in. It reports whether h is now
// the first.
func (s *schedule) sooner(h *Hold, t time.Time, add bool) bool {
	switch {
	case !s.in(h) && add:
		s.set(h, mono(t))
	case s.in(h) && mono(t) < s.at(h):
		s.set(h, mono(t))
	default:
		return false
	}
	return h.index[s.which] == 0
}

// remove takes h out of the schedule, if it is in.
func (s *schedule) remove(h *Hold) {
	i := int(h.index[s.which])
	if i < 0 {
		return
	}
	n := len(s.holds) - 1
	if n != i {
		s.swap(i, n)
	}
	s.holds[n] = entry{}
	s.holds = s.holds[:n]
	h.index[s.which] = -1
	if n != i {
		s.fix(i)
	}
}

// first returns the first hold and its time, or nil.
func (s *schedule) first() (*Hold, time.Time) {
	if len(s.holds) == 0 {
		return nil, time.Time{}
	}
	return s.holds[0].h, fromMono(s.holds[0].at)
}
