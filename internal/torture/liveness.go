package torture

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// waitBound is how long a waiter may take to get a free lock when nothing
// else happens: generous (2 busy cores, -race), yet far below the
// seconds-long TTLs of the relay names.
const waitBound = 1500 * time.Millisecond

// busy is a span during which a lock may have been held, and why it may
// have been held until its end.
type busy struct {
	from, to int64
	why      string
	lease    string // the lease behind it, if any
}

// occupancy returns the spans during which the history allows name to
// have been held: every owner from its grant until freeAt, and acquire
// calls whose outcome is unknown (their process was killed before they
// returned; they failed with a Redis error) during the call, and for a
// TTL after it when a fault may have kept the cleanup from running.
func (h *history) occupancy(name string) []busy {
	var out []busy
	for _, l := range h.leasesOf(name) {
		to, why := h.freeAt(l)
		out = append(out, busy{from: l.grant.T, to: to, why: why, lease: l.key})
	}
	for _, c := range h.callsOf(name) {
		if c.call.Reent {
			continue
		}
		ttl := int64(0)
		for _, t := range c.call.TTLs {
			ttl = max(ttl, t*int64(time.Microsecond))
		}
		switch {
		case c.result == nil:
			if k, ok := h.killed[c.call.W]; ok {
				out = append(out, busy{from: c.call.T, to: h.expireBy(c.call.T, k+ttl), why: "an acquire in flight when its process was killed"})
			}
		case c.result.K == kFail && c.result.EK != "ctx" && c.result.EK != "notobtained" && c.result.EK != "deadlock" && c.result.EK != "invalid":
			to, why := c.result.T, "an acquire that failed ("+c.result.EK+")"
			if h.serverFaultIn(c.call.T, c.result.T) {
				to, why = h.expireBy(c.call.T, to+ttl), why+" during a server fault"
			}
			out = append(out, busy{from: c.call.T, to: to, why: why})
		case c.result.K == kFail && c.result.EK == "ctx" && h.serverFaultIn(c.call.T, c.result.T):
			out = append(out, busy{from: c.call.T, to: h.expireBy(c.call.T, c.result.T+ttl), why: "an acquire cancelled during a server fault"})
		}
	}
	slices.SortFunc(out, func(a, b busy) int { return cmpInt(a.from, b.from) })
	return out
}

// freeSpans returns the spans within [from, to] that no busy span covers,
// each with the busy span that ended just before it. bs is sorted by
// from, and reach[i] is the index of the span that ends last among
// bs[:i+1] (see reaches): what happened before from is read from it, not
// by going through bs from its start, so that a long run's check is not
// quadratic in its waits.
func freeSpans(bs []busy, reach []int, from, to int64) (spans [][2]int64, before []busy) {
	cur := from
	var last busy
	k := sort.Search(len(bs), func(i int) bool { return bs[i].from > from })
	if k > 0 {
		// the holding that ended last by from, or the one that covers
		// from and ends last
		last = bs[reach[k-1]]
		cur = max(cur, last.to)
	}
	if cur >= to {
		return nil, nil
	}
	for _, b := range bs[k:] {
		if b.from > cur {
			if b.from > to {
				break
			}
			spans, before = append(spans, [2]int64{cur, b.from}), append(before, last)
		}
		if b.to > cur {
			cur, last = b.to, b
		}
		if cur >= to {
			return spans, before
		}
	}
	if cur < to {
		spans, before = append(spans, [2]int64{cur, to}), append(before, last)
	}
	return spans, before
}

// reaches returns, for each i, the index of the span of bs[:i+1] that
// ends last (the first of them on a tie).
func reaches(bs []busy) []int {
	reach := make([]int, len(bs))
	for i := range bs {
		reach[i] = i
		if i > 0 && bs[reach[i-1]].to >= bs[i].to {
			reach[i] = reach[i-1]
		}
	}
	return reach
}

// allowance is how long a waiter may wait on a free name during [x, y]:
// waitBound plus the faults that overlap it and their after-effects.
func (h *history) allowance(name string, x, y int64) (time.Duration, []fault) {
	d := waitBound
	var fs []fault
	for _, f := range h.faults {
		if f.T > y || f.End < x-int64(time.Second) {
			continue
		}
		fs = append(fs, f)
		// A clock fault: what the server's clock lost (a step back
		// takes no time of its own; a stand-still lost its length and
		// the run-on margin), by which every expiry came later: a dead
		// holder's lease, a dead waiter's place, a lock kept for it.
		d += time.Duration(max(f.End-f.T, f.lost)) + 300*time.Millisecond
		switch {
		case f.server:
			d += time.Second
		case stoppedWorker(f.Msg) != "", strings.HasPrefix(f.Msg, "kill"):
			d += queueTTL * 4 / 3 // a dead or frozen waiter's place in the queue (a lock kept for it)
		}
	}
	return d, fs
}

// waitEnd is when an acquire call stopped waiting: when it returned, when
// its process was killed, or when the run stopped.
func (h *history) waitEnd(c *callRec) int64 {
	if c.result != nil {
		return c.result.T
	}
	if k, ok := h.killed[c.call.W]; ok {
		return k
	}
	return h.end
}

// checkWaits: a Lock (Mutex, FairMutex, RWMutex writer; not re-entry, not
// LockAll) or a Campaign must not go on waiting on a free lock for longer
// than the allowance.
func (h *history) checkWaits(name string) []Violation {
	// A RedLock wait is a round of jitter and pub/sub on nodes that
	// partitions and restarts take away: no wait bound.
	if k := lockKind(name); k == "sem" || k == "quorum" {
		return nil
	}
	occ := h.occupancy(name)
	reach := reaches(occ)
	var vs []Violation
	for _, c := range h.callsOf(name) {
		e := c.call
		if !e.Wait || e.Reent || len(e.Names) != 1 || e.Names[0] != name || (len(e.Sides) == 1 && e.Sides[0] == "r") {
			continue
		}
		end := h.waitEnd(c)
		if end-e.T < int64(waitBound) {
			continue
		}
		spans, before := freeSpans(occ, reach, e.T, end)
		for i, s := range spans {
			allowed, fs := h.allowance(name, s[0], s[1])
			if time.Duration(s[1]-s[0]) <= allowed {
				continue
			}
			v := Violation{Kind: "wait", T: s[0] + int64(allowed), Related: []Event{e}}
			if c.result != nil {
				v.Related = append(v.Related, *c.result)
			}
			why := "it was never held"
			v.Cat = fmt.Sprintf("wait [%s] on a free lock after %s%s", e.Scn, before[i].why, h.waitHints(e, s[0], fs))
			if pinned := h.pinned(name, s[0]); len(pinned) > 0 {
				v.Cat = fmt.Sprintf("wait [%s] on a lock given up by a live holder (%s)", e.Scn, pinned[0].abandon)
				for _, l := range pinned {
					v.Leases = append(v.Leases, l.key)
				}
			}
			if b := before[i]; b.why != "" {
				why = fmt.Sprintf("its previous holding ended (%s)", b.why)
				if b.lease != "" {
					v.Leases = append(v.Leases, b.lease)
					why = fmt.Sprintf("lease %s ended (%s)", b.lease, b.why)
				}
			}
			outcome := "still waiting when the run stopped"
			if c.result != nil {
				outcome = fmt.Sprintf("then %s at %s", resultWord(*c.result), h.rel(c.result.T))
			}
			v.Msg = fmt.Sprintf("%q: a %s %s (%s, scenario %s, called %s) waited %v on a free lock (free from %s, since %s; "+
				"allowed %v with %d fault(s) nearby); %s",
				name, lockKind(name), acquireWord(e), callKey(e.W, e.Op), e.Scn, h.rel(e.T), time.Duration(s[1]-s[0]).Round(time.Millisecond),
				h.rel(s[0]), why, allowed, len(fs), outcome)
			for _, f := range fs {
				v.Related = append(v.Related, f.Event)
			}
			vs = append(vs, v)
		}
	}
	return vs
}

func resultWord(e Event) string {
	if e.K == kGrant {
		return "granted"
	}
	return "failed (" + e.EK + ")"
}

// probeDeadline is when the final probe must find name free: the latest
// freeAt of its holders plus the allowance.
func (h *history) probeDeadline(name string) (int64, busy) {
	var latest busy
	latest.to = h.end
	for _, b := range h.occupancy(name) {
		if b.to > latest.to {
			latest = b
		}
	}
	// a lock may be kept for a waiter that died, until its place expires
	// (later by what the server's clock lost meanwhile)
	return h.expireBy(latest.to-int64(2*queueTTL), latest.to+int64(waitBound+queueTTL*4/3)), latest
}

// waitHints names what may explain a lost wake-up: a pub/sub reconnect
// nearby, or waits on the same Client and name that gave up early.
func (h *history) waitHints(e Event, free int64, fs []fault) string {
	var hints []string
	for _, f := range fs {
		if strings.HasPrefix(f.Msg, "pubsub") || strings.HasPrefix(f.Msg, "restart") {
			// A reconnect only explains the loss of a release that fell
			// in it; one nearby is common with waits of seconds.
			if free >= f.T-int64(5*time.Millisecond) && free <= f.End+int64(200*time.Millisecond) {
				hints = append(hints, "the release during a pub/sub reconnect")
				break
			}
		}
	}
	for _, c := range h.calls {
		if c.call.W == e.W && c.call.Client == e.Client && c.call.T < e.T && c.call.Scn == "relay-cancel" &&
			slices.Equal(c.call.Names, e.Names) {
			hints = append(hints, "cancelled waits on its Client")
			break
		}
	}
	if len(hints) == 0 {
		return ""
	}
	return " (with " + strings.Join(hints, ", ") + ")"
}

// pinned returns the leases of name given up (a failed Unlock, not
// retried) before t by a holder whose process was not killed and whose
// Client was not closed by t: the lock should be free a TTL after, but a
// library that goes on renewing such a hold keeps it forever.
func (h *history) pinned(name string, t int64) []*leaseRec {
	var out []*leaseRec
	for _, l := range h.leasesOf(name) {
		if l.grant.T > t {
			break
		}
		if l.unlockOK != 0 || l.abandon == "" || !slices.Contains(l.grant.Names, name) {
			continue
		}
		if k, ok := h.killed[l.w]; ok && k < t {
			continue
		}
		if c, ok := h.closes[l.w][l.grant.Client]; ok && c.T < t {
			continue
		}
		if to, _ := h.freeAt(l); to <= t && slices.ContainsFunc(l.events, func(e Event) bool {
			return e.K == kUnlock && e.EK != "" && e.EK != "lost" && e.EK != "notheld" && e.EK != "unlocked"
		}) {
			out = append(out, l)
		}
	}
	return out
}

// ctxBound is how soon after its ctx ends a call must return (the
// library's promise), and schedSlack what a loaded machine adds to it:
// the workers run under -race on 2 cores shared with the parent and other
// work, where a goroutine that became runnable may wait a few scheduler
// quanta and a GC cycle (measured: runs of the fixed paths return within
// ~30 ms of the deadline; 250 ms leaves room for an unlucky moment but is
// far below the 1.9-15 s that a call bound to a stalled server takes).
const (
	ctxBound   = 50 * time.Millisecond
	schedSlack = 250 * time.Millisecond
	overrunMax = ctxBound + schedSlack
)

var stoppedRE = regexp.MustCompile(`worker (\S+) SIGSTOP`)

// stoppedWorker returns the worker a fault froze (SIGSTOP), or "".
func stoppedWorker(msg string) string {
	if m := stoppedRE.FindStringSubmatch(msg); m != nil {
		return m[1]
	}
	return ""
}

// stops returns the faults that froze worker w.
func (h *history) stops(w string) []fault {
	var out []fault
	for _, f := range h.faults {
		if stoppedWorker(f.Msg) == w {
			out = append(out, f)
		}
	}
	return out
}

// anyWorkerStopped reports whether some worker was frozen (SIGSTOP) or
// killed during [from, to].
func (h *history) anyWorkerStopped(from, to int64) bool {
	for _, f := range h.faults {
		if stoppedWorker(f.Msg) != "" && f.T <= to && f.End >= from {
			return true
		}
	}
	for _, k := range h.killed {
		if k >= from && k <= to {
			return true
		}
	}
	return false
}

// timesOf returns each worker's event times, sorted (made once).
func (h *history) timesOf() map[string][]int64 {
	if h.workerTimes == nil {
		h.workerTimes = map[string][]int64{}
		for _, e := range h.events {
			h.workerTimes[e.W] = append(h.workerTimes[e.W], e.T)
		}
		for _, ts := range h.workerTimes {
			slices.Sort(ts)
		}
	}
	return h.workerTimes
}

// stallSilence is how long a worker process with goroutines at work
// (dozens of events every 50 ms) must record nothing to count as stalled
// by its machine (the scheduler or the collector under -race on 2 cores),
// as if it had been frozen.
const stallSilence = 200 * time.Millisecond

// anyWorkerStalled reports whether some worker, alive before from and
// after to, recorded nothing for stallSilence within [from, to]: its
// process stalled, and its places and holds aged as a frozen worker's
// do (seen: a reader's worker silent for 300 ms while it held rws, and a
// writer called before another was granted after it).
func (h *history) anyWorkerStalled(from, to int64) bool {
	for w, ts := range h.timesOf() {
		if w == "" || w == "parent" || len(ts) == 0 || ts[0] > from || ts[len(ts)-1] < to {
			continue
		}
		if h.silence(w, from, to) >= stallSilence {
			return true
		}
	}
	return false
}

// checkOverruns: an acquire (Lock, TryLock, Acquire, LockAll; any Client,
// with or without ContextTimeoutEnabled) must return within overrunMax of
// its ctx's deadline, even while the server stalls. The clock starts at
// the later of the deadline and the call's start (writing the call event
// may have blocked), and is held while the worker's own process was
// frozen (SIGSTOP): it cannot return while stopped.
func (h *history) checkOverruns() []Violation {
	var vs []Violation
	stops := map[string][]fault{}
	for _, c := range h.calls {
		e, r := c.call, c.result
		if e.DL == 0 || r == nil {
			continue
		}
		from := max(e.DL, r.St)
		if r.T-from <= int64(overrunMax) {
			continue
		}
		if _, ok := stops[e.W]; !ok {
			stops[e.W] = h.stops(e.W)
		}
		var frozen []Event
		for _, f := range stops[e.W] {
			if f.T <= r.T && f.End >= from {
				from = max(from, f.End)
				frozen = append(frozen, f.Event)
			}
		}
		late := time.Duration(r.T - from)
		if late <= overrunMax {
			continue
		}
		// With the server answering, a span in which the call's process
		// recorded nothing at all — none of its dozens of busy goroutines
		// — is the machine's (a starved VM, a long GC under -race, the
		// kernel flushing the histories' writes), not the library's: with
		// Redis up, a dlock that hung one call would not silence every
		// other goroutine of its process.
		if !h.serverFaultIn(e.T, r.T) {
			late -= h.silence(e.W, from, r.T)
			if late <= overrunMax {
				continue
			}
		}
		var fs []string
		related := []Event{e, *r}
		for _, f := range h.faults {
			if f.T <= r.T && f.End >= e.T {
				fs = append(fs, faultKind(f.Msg))
				related = append(related, f.Event)
			}
		}
		during := "no fault"
		if len(fs) > 0 {
			during = strings.Join(slices.Compact(fs), ", ")
		}
		vs = append(vs, Violation{Kind: "ctx", Cat: fmt.Sprintf("ctx: a call outlived its ctx (client %s, during %s)", clientKind(e.Client), during),
			T: from + int64(overrunMax), Related: related,
			Msg: fmt.Sprintf("%v: %s of %v (%s, scenario %s, client %s) with a %v ctx, called %s, returned (%s) at %s: %v after its deadline %s (bound %v = %v + %v)",
				e.Names, acquireWord(e), e.Names, callKey(e.W, e.Op), e.Scn, e.Client, time.Duration(e.Timeout)*time.Microsecond,
				h.rel(e.T), resultWord(*r), h.rel(r.T), late.Round(time.Millisecond), h.rel(e.DL), overrunMax, ctxBound, schedSlack)})
	}
	return vs
}

// silence returns the longest span within [from, to] in which worker w
// recorded no event.
func (h *history) silence(w string, from, to int64) time.Duration {
	ts := h.timesOf()[w]
	i := sort.Search(len(ts), func(i int) bool { return ts[i] > from })
	longest, last := int64(0), from
	for ; i < len(ts) && ts[i] < to; i++ {
		longest, last = max(longest, ts[i]-last), ts[i]
	}
	return time.Duration(max(longest, to-last))
}

// clientKind tells the go-redis client behind a dlock Client id: slot 0
// has ContextTimeoutEnabled, slot 1 has not (as most users make it), slot
// 2 has a ReadTimeout shorter than a stall, so go-redis sends its calls
// again (resendReadTimeout).
func clientKind(id string) string {
	switch {
	case strings.HasPrefix(id, "c0."):
		return "with ContextTimeoutEnabled"
	case strings.HasPrefix(id, "c1."):
		return "without ContextTimeoutEnabled"
	case strings.HasPrefix(id, "c2."):
		return "with a 400ms ReadTimeout (go-redis re-sends)"
	}
	return "private"
}

func acquireWord(e Event) string {
	switch {
	case len(e.Names) > 1:
		return "LockAll"
	case e.Permits > 0 && e.Wait:
		return "Acquire"
	case e.Permits > 0:
		return "TryAcquire"
	case e.Wait && len(e.Names) == 1 && lockKind(e.Names[0]) == "election":
		return "Campaign"
	case e.Wait:
		return "Lock"
	}
	return "TryLock"
}

// Phase bounds of an RWMutex: a waiting reader may see at most
// readerPassMax writer grants, a waiting writer at most writerPassMax
// read phases begin, before it is served. Writers-first with a queue lets
// at most the writers already waiting (2 in rwstream) go first; one more
// for the hold in effect when it is granted around the call.
const (
	readerPassMax = 3
	writerPassMax = 2
)

// turn is a grant of an RWMutex that the phase bounds count: when it was
// granted and called, its side, its lease.
type turn struct {
	t, call int64
	side    string
	key     string
}

// checkPhases: an RWMutex waiter (RLock or Lock; not re-entry, not
// LockAll) must not be passed by more than a couple of turns of the other
// side. A waiter whose own process was frozen or killed during the wait,
// or whose wait a server fault overlaps, is not checked (its place in the
// queue may have expired).
func (h *history) checkPhases(name string) []Violation {
	if lockKind(name) != "rw" {
		return nil
	}
	var grants []turn
	// Nested grants (a read inside a write): a writer that downgrades
	// opens a read phase of its own, which the bounds do not count yet;
	// a wait with one in it is not checked (a known gap).
	var nested []int64
	for _, l := range h.leasesOf(name) {
		// A nested acquire (through a lease's context: a read inside a
		// write) is no turn of its own: it lives inside its outer hold.
		if i := slices.Index(l.grant.Names, name); i >= 0 && !l.grant.Reent && l.call.Lease == 0 && i < len(l.grant.Sides) {
			grants = append(grants, turn{l.grant.T, l.call.T, l.grant.Sides[i], l.key})
		} else if i >= 0 && l.call.Lease != 0 {
			nested = append(nested, l.grant.T)
		}
	}
	var vs []Violation
	for _, c := range h.callsOf(name) {
		e := c.call
		if !e.Wait || e.Reent || e.Lease != 0 || len(e.Names) != 1 || e.Names[0] != name || len(e.Sides) != 1 {
			continue
		}
		end := h.waitEnd(c)
		if end-e.T < int64(50*time.Millisecond) {
			continue
		}
		if k, ok := h.killed[e.W]; ok && k <= end {
			continue
		}
		if slices.ContainsFunc(h.stops(e.W), func(f fault) bool { return f.T <= end && f.End >= e.T }) {
			continue
		}
		// Nor one that a server fault overlaps: a stall longer than a
		// place expires the places of the waiters who could not renew
		// them, and an expired writer's place lets the readers behind it go.
		if h.serverFaultIn(e.T, end) {
			continue
		}
		if slices.ContainsFunc(nested, func(t int64) bool { return t >= e.T && t <= end }) {
			continue
		}
		// Nor one that ended on a Redis error (its connection reset, new
		// ones refused: the reset fault): the server may not have had its
		// place, nor a call of it to serve, for most of the wait (seen:
		// seed 730021029, a reader whose connections the reset fault cut
		// for 311 ms while 6 writers of other workers went first).
		if c.result != nil && c.result.K != kGrant && c.result.EK == "redis" {
			continue
		}
		// Nor one that another worker's freeze or death overlaps (or
		// precedes by less than two place lives): the bounds assume that
		// the waiters ahead keep their places, and a frozen worker's
		// writer place expires like a stalled server's, letting the
		// readers behind it go (seen: a writer passed by 3 read phases
		// while a handoff fault had another worker stopped).
		if h.anyWorkerStopped(e.T-int64(2*queueTTL), end) || h.anyWorkerStalled(e.T-int64(2*queueTTL), end) {
			continue
		}
		from := e.T
		if e.Sides[0] == "w" {
			from = h.writerQueued(e.T, end, grants)
		}
		i := sort.Search(len(grants), func(i int) bool { return grants[i].t > from })
		prev := ""
		if i > 0 {
			prev = grants[i-1].side
		}
		n, first, last := 0, "", ""
		for ; i < len(grants) && grants[i].t < end; i++ {
			g := grants[i]
			switch {
			case e.Sides[0] == "r" && g.side == "w":
				n++
			case e.Sides[0] == "w" && g.side == "r" && prev != "r":
				n++ // a read phase begins
			default:
				prev = g.side
				continue
			}
			prev = g.side
			if first == "" {
				first = g.key
			}
			last = g.key
		}
		bound, what, other := readerPassMax, "reader", "writer grants"
		if e.Sides[0] == "w" {
			bound, what, other = writerPassMax, "writer", "read phases"
		}
		if n <= bound {
			continue
		}
		outcome := "still waiting when the run stopped"
		related := []Event{e}
		if c.result != nil {
			outcome = fmt.Sprintf("then %s at %s", resultWord(*c.result), h.rel(c.result.T))
			related = append(related, *c.result)
		}
		vs = append(vs, Violation{Kind: "phase", Cat: fmt.Sprintf("phase: an RWMutex %s passed by more than %d %s", what, bound, other),
			T: end, Leases: []string{first, last}, Related: related,
			Msg: fmt.Sprintf("%q: a %s (%s, scenario %s, called %s) waited %v while %d %s went first (bound %d); %s",
				name, what, callKey(e.W, e.Op), e.Scn, h.rel(e.T), time.Duration(end-e.T).Round(time.Millisecond), n, other, bound, outcome)})
	}
	return vs
}

// arrivalSlack is how late, after a writer's call, the first attempt of
// a writer called after it may still reach the server before it
// (writerQueued): a path or a process slow for that long.
const arrivalSlack = 250 * time.Millisecond

// writerQueued is when a writer that called at call (and was served at
// end) was, at the latest, not yet queued on the server: the bounds count
// from the moment its place is there, and the client cannot see that
// moment (its first attempt may sit in a slow path or process; seen: 80
// ms). Writers queue in arrival order, so a writer called after it,
// within arrivalSlack, and granted before it, was granted when its place
// was not there yet: counting starts after the last such grant. Beyond
// arrivalSlack an overtaking writer does not move the start (a writer
// queue that loses places must still fail the bound).
func (h *history) writerQueued(call, end int64, grants []turn) int64 {
	from := call
	for _, g := range grants {
		if g.side == "w" && g.call > call && g.call <= call+int64(arrivalSlack) && g.t < end {
			from = max(from, g.t)
		}
	}
	return from
}

// faultKind is a fault's message without its numbers ("stall: DEBUG
// SLEEP", "stall: redis-server SIGSTOP"), to tell categories apart.
func faultKind(msg string) string {
	if i := strings.IndexAny(msg, "0123456789("); i > 0 {
		msg = msg[:i]
	}
	if i := strings.Index(msg, " worker "); i > 0 {
		msg = msg[:i]
	}
	msg = strings.TrimSpace(msg)
	msg = strings.TrimSuffix(msg, " for")
	msg = strings.TrimSuffix(msg, " worker")
	return strings.TrimSpace(strings.TrimSuffix(msg, " x"))
}
