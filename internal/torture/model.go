package torture

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// leaseRec is what the history says about one lease.
type leaseRec struct {
	key      string // worker#lease
	w        string
	call     Event
	grant    Event
	maxTTL   int64 // ns: the longest TTL it was given (its names', Extends)
	belief   int64 // the last belief, 0 if none
	last     int64 // its last event
	unlockOK int64 // a successful Unlock, 0 if none
	ended    int64 // first lost/abandon/failed-unlock event, 0 if none
	abandon  string
	events   []Event
}

// callRec is one acquire call.
type callRec struct {
	call   Event
	result *Event // grant or fail; nil if none was recorded
}

// fault is an injected fault, or a worker stop or kill, from T to End.
type fault struct {
	Event
	server bool // it hit redis-server (restart, pause, killed connections)
	// lost is the time the server's clock lost by a clock fault (ns; it
	// stood still, or stepped back): every expiry on the server comes
	// that much later. Negative: a forward step. 0 for other faults.
	lost int64
}

// history is the indexed run.
type history struct {
	events  []Event
	start   int64
	end     int64 // when the workers were told to stop
	leases  map[string]*leaseRec
	calls   map[string]*callRec
	killed  map[string]int64            // worker -> SIGKILL time
	closes  map[string]map[string]Event // worker -> client -> close event
	faults  []fault
	fatal   []Event
	ordered []*leaseRec // by grant time
	reads   []Event     // what Leader and Observe said of elections (kLeader, kObserve)
	fwrites []Event     // fenced writes' outcomes (kFWrite)
	flogs   []Event     // the fenced store's logs after the run (kFLog)

	workerTimes map[string][]int64     // each worker's event times, sorted (see silence)
	leasesBy    map[string][]*leaseRec // by name, in grant order (see leasesOf)
	callsBy     map[string][]*callRec  // by name (see callsOf)
	again       map[string][]*callRec  // re-entrant calls by their outer lease (see valueTerms)
}

// leasesOf returns the leases granted on name, in grant order: the checks
// of one name go through these, not through every lease of the run.
func (h *history) leasesOf(name string) []*leaseRec {
	if h.leasesBy == nil {
		h.leasesBy = map[string][]*leaseRec{}
		for _, l := range h.ordered {
			for _, n := range slices.Compact(slices.Sorted(slices.Values(l.grant.Names))) {
				h.leasesBy[n] = append(h.leasesBy[n], l)
			}
		}
	}
	return h.leasesBy[name]
}

// callsOf returns the acquire calls made on name.
func (h *history) callsOf(name string) []*callRec {
	if h.callsBy == nil {
		h.callsBy = map[string][]*callRec{}
		for _, c := range h.calls {
			for _, n := range slices.Compact(slices.Sorted(slices.Values(c.call.Names))) {
				h.callsBy[n] = append(h.callsBy[n], c)
			}
		}
	}
	return h.callsBy[name]
}

func callKey(w string, op int64) string  { return fmt.Sprintf("%s#op%d", w, op) }
func leaseKey(w string, id int64) string { return fmt.Sprintf("%s#%d", w, id) }
func (l *leaseRec) touch(e Event)        { l.last = max(l.last, e.T); l.events = append(l.events, e) }
func (l *leaseRec) endAt(t int64)        { l.ended = minNonZero(l.ended, t) }
func minNonZero(a, b int64) int64 {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

// index builds the history of a run that started at start and was told
// to stop at end.
func index(events []Event, start, end int64) *history {
	h := &history{events: events, start: start, end: end, leases: map[string]*leaseRec{},
		calls: map[string]*callRec{}, killed: map[string]int64{}, closes: map[string]map[string]Event{}}
	for _, e := range events {
		switch e.K {
		case kCall:
			h.calls[callKey(e.W, e.Op)] = &callRec{call: e}
		case kGrant, kFail:
			c := h.calls[callKey(e.W, e.Op)]
			if c == nil {
				c = &callRec{call: Event{T: e.T, K: kCall, W: e.W, Op: e.Op, Names: e.Names}}
				h.calls[callKey(e.W, e.Op)] = c
			}
			e := e
			c.result = &e
			if e.K == kGrant {
				l := &leaseRec{key: leaseKey(e.W, e.Lease), w: e.W, call: c.call, grant: e}
				for _, t := range e.TTLs {
					l.maxTTL = max(l.maxTTL, t*int64(time.Microsecond))
				}
				l.touch(e)
				if e.EK != "" { // Err() was not nil right after the return
					l.endAt(e.T)
				}
				h.leases[l.key] = l
				h.ordered = append(h.ordered, l)
			}
		case kBelief, kLost, kExtCall, kExt, kUCall, kUnlock, kAbandon:
			l := h.leases[leaseKey(e.W, e.Lease)]
			if l == nil {
				continue
			}
			l.touch(e)
			switch e.K {
			case kBelief:
				l.belief = max(l.belief, e.T)
			case kLost:
				l.endAt(e.T)
			case kExtCall:
				l.maxTTL = max(l.maxTTL, e.D*int64(time.Microsecond))
			case kUnlock:
				if e.EK == "" {
					l.unlockOK = e.T
				} else {
					l.endAt(e.T)
				}
			case kAbandon:
				l.endAt(e.T)
				l.abandon = e.Msg
			}
		case kKill:
			h.killed[e.W] = e.T
		case kClose:
			if h.closes[e.W] == nil {
				h.closes[e.W] = map[string]Event{}
			}
			h.closes[e.W][e.Client] = e
		case kFault:
			f := fault{Event: e, server: isServerFault(e.Msg)}
			if isClockFault(e.Msg) {
				f.lost = e.D * int64(time.Microsecond)
			}
			h.faults = append(h.faults, f)
		case kFatal:
			h.fatal = append(h.fatal, e)
		case kLeader, kObserve:
			h.reads = append(h.reads, e)
		case kFWrite:
			h.fwrites = append(h.fwrites, e)
		case kFLog:
			h.flogs = append(h.flogs, e)
		}
	}
	slices.SortFunc(h.ordered, func(a, b *leaseRec) int { return cmpInt(a.grant.T, b.grant.T) })
	for _, l := range h.ordered {
		slices.SortStableFunc(l.events, func(a, b Event) int { return cmpInt(a.T, b.T) })
	}
	slices.SortFunc(h.faults, func(a, b fault) int { return cmpInt(a.T, b.T) })
	// A CLIENT PAUSE ends by the server's clock: one that stood still or
	// stepped back during it paused the server that much longer than the
	// injector, which ends the fault by its own clock, recorded.
	for i, f := range h.faults {
		if f.server && strings.Contains(f.Msg, "CLIENT PAUSE") {
			h.faults[i].End += h.clockLost(f.T, f.End)
		}
	}
	slices.SortStableFunc(h.reads, func(a, b Event) int { return cmpInt(a.T, b.T) })
	return h
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// isServerFault tells faults that hit redis-server (and so every client)
// from those that hit one worker process or only pub/sub connections. A
// "late" fault counts: the server does not hear from the stalled
// connections' clients (their renewals, their places) while it lasts; so
// does "blockedwrite" (a path that stops reading, or the server stopped).
// "reset" does not: the server runs every command, and what the clients
// make of a reset is what it tests.
func isServerFault(msg string) bool {
	for _, p := range []string{"normal", "flush", "cpause", "spause", "restart", "stall", "late", "blockedwrite"} {
		if len(msg) >= len(p) && msg[:len(p)] == p {
			return true
		}
	}
	return false
}

// isClockFault tells the faults of the server's clock (faults.go,
// clockKinds).
func isClockFault(msg string) bool { return strings.HasPrefix(msg, "clock") }

// clockLost is the time the server's clock lost (stood still, stepped
// back) by the clock faults that overlap [from, to]; forward steps count
// nothing.
func (h *history) clockLost(from, to int64) int64 {
	var lost int64
	for _, f := range h.faults {
		if f.lost > 0 && f.T <= to && f.End >= from {
			lost += f.lost
		}
	}
	return lost
}

// expireBy is when a server expiry that the real clock would pass at at
// passes, when the key was set at from or later: the server's clock
// counts it, so each clock fault between from and then puts it off by
// the time that clock lost.
func (h *history) expireBy(from, at int64) int64 {
	end := at
	for {
		// a fault the delay reaches counts too
		next := at + h.clockLost(from, end)
		if next == end {
			return end
		}
		end = next
	}
}

// serverFaultIn reports whether a server fault overlaps [from, to].
func (h *history) serverFaultIn(from, to int64) bool {
	for _, f := range h.faults {
		if f.server && f.T <= to && f.End >= from {
			return true
		}
	}
	return false
}

// freeAt is the latest time the lease's lock can still be held for it
// (on the lease's i-th name), and why: the history gives no grounds to
// keep the lock held after it.
func (h *history) freeAt(l *leaseRec) (int64, string) {
	if l.unlockOK != 0 {
		return l.unlockOK, "unlocked"
	}
	// Closed with its Client, still held then: Close releases it.
	if c, ok := h.closes[l.w][l.grant.Client]; ok && l.grant.T < c.T &&
		(l.ended == 0 || l.ended >= c.T) && !l.unlockInFlight(c.T) && !h.serverFaultIn(c.T-int64(time.Second), c.End) {
		return c.End, "its Client was closed"
	}
	base, why := l.last, "given up"
	switch {
	case l.abandon != "":
		why = l.abandon
	case l.ended != 0:
		why = "lost or failed to unlock"
	}
	if k, ok := h.killed[l.w]; ok && k > base {
		base, why = k, "its process was killed"
	}
	if l.ended == 0 && l.unlockOK == 0 {
		if _, ok := h.killed[l.w]; !ok {
			base, why = max(base, h.end), "still held when the run stopped"
		}
	}
	return h.expireBy(base-l.maxTTL, base+l.maxTTL), why
}

// unlockInFlight reports an Unlock of the lease that started before t
// and had not returned by t.
func (l *leaseRec) unlockInFlight(t int64) bool {
	open := false
	for _, e := range l.events {
		if e.T >= t {
			break
		}
		switch e.K {
		case kUCall:
			open = true
		case kUnlock:
			open = false
		}
	}
	return open
}

// rel formats t relative to the start of the run.
func (h *history) rel(t int64) string {
	return fmt.Sprintf("+%.6fs", float64(t-h.start)/1e9)
}
