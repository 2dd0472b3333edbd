package torture

import (
	"fmt"
	"slices"
	"sort"
)

// Elections are exclusive locks to the checks of check.go and liveness.go
// (a Campaign is an acquire, its term the fence, a Resign an Unlock): two
// leaders at once, a leadership that begins after a higher term was
// granted, terms not increasing, a candidate left waiting on a free
// election and a Campaign that outlives its ctx are found there. What
// only an election has is checked here: what Leader and Observe report.

// fenceOf returns the fence of lease l on name (0 if it has none).
func fenceOf(l *leaseRec, name string) int64 {
	if i := slices.Index(l.grant.Names, name); i >= 0 && i < len(l.grant.Fences) {
		return l.grant.Fences[i]
	}
	return 0
}

// checkLeaderReads: what Election.Leader and Observe said of name agrees
// with the grants.
//
//   - A value comes with its own Campaign's term: values name the Campaign
//     that recorded them (valueOf), and a value is a field of its leader's
//     hold, read in one script with the term. A leader's second Campaign
//     on its own Client names the first (againValueOf): its value comes
//     with the first's term, or with the term the second won itself when
//     the first leadership had ended (valueTerms).
//   - Leader cannot report a lower term than one granted before it was
//     called: the term is the election's fence counter, read at the server
//     after the INCR of that grant (its Campaign returned before the read
//     was called).
//   - A leader that still believed it led right after its own Leader read
//     (Err() nil) is what the read reports: its hold outlives its local
//     deadline at the server, so it was there, with its value, throughout
//     — unless a Resign of it was in flight (resigning).
func (h *history) checkLeaderReads(name string) []Violation {
	if lockKind(name) != "election" {
		return nil
	}
	ls := h.leasesOf(name)
	best := make([]int64, len(ls)) // the highest term among ls[:i+1]
	for i, l := range ls {
		best[i] = fenceOf(l, name)
		if i > 0 {
			best[i] = max(best[i], best[i-1])
		}
	}
	var vs []Violation
	for _, e := range h.reads {
		if len(e.Names) != 1 || e.Names[0] != name || len(e.Fences) != 1 {
			continue
		}
		term, what := e.Fences[0], "Observe"
		if e.K == kLeader {
			what = "Leader"
		}
		if key, ok := campaignOf(e.Msg); ok && term != 0 {
			if c := h.calls[key]; c != nil && c.result != nil && c.result.K == kGrant && len(c.result.Fences) == 1 {
				if terms, known := h.valueTerms(c, e.Msg, name); known && !slices.Contains(terms, term) {
					won := fmt.Sprintf("won term %d", c.result.Fences[0])
					if len(terms) > 1 {
						won += fmt.Sprintf(", and its leader's second Campaign, which recorded it, %v", terms[1:])
					}
					vs = append(vs, Violation{Kind: "election", Cat: "election: a value read with another leader's term", T: e.T,
						Leases: []string{leaseKey(c.result.W, c.result.Lease)}, Related: []Event{e},
						Msg: fmt.Sprintf("%q: %s (worker %s) reported value %q with term %d, but that value's Campaign (%s) %s",
							name, what, e.W, e.Msg, term, key, won)})
				}
			}
		}
		if e.K != kLeader {
			continue
		}
		if i := sort.Search(len(ls), func(i int) bool { return ls[i].grant.T >= e.St }); i > 0 && term != 0 && best[i-1] > term {
			j := slices.IndexFunc(ls[:i], func(l *leaseRec) bool { return fenceOf(l, name) == best[i-1] })
			vs = append(vs, Violation{Kind: "election", Cat: "election: Leader read a term older than one granted before", T: e.T,
				Leases: []string{ls[j].key}, Related: []Event{e},
				Msg: fmt.Sprintf("%q: Leader (worker %s, called %s) reported term %d (value %q), but term %d had been granted to lease %s at %s",
					name, e.W, h.rel(e.St), term, e.Msg, best[i-1], ls[j].key, h.rel(ls[j].grant.T))})
		}
		if e.Lease == 0 {
			continue
		}
		if l := h.leases[leaseKey(e.W, e.Lease)]; l != nil && fenceOf(l, name) != term && !resigning(ls, l, e.St, e.T) {
			got := fmt.Sprintf("term %d (value %q)", term, e.Msg)
			if term == 0 {
				got = "nobody (" + e.EK + ")"
			}
			vs = append(vs, Violation{Kind: "election", Cat: "election: a live leader's own Leader read reported another", T: e.T,
				Leases: []string{l.key}, Related: []Event{e},
				Msg: fmt.Sprintf("%q: leader %s (term %d) read %s at %s, and Err() was still nil right after",
					name, l.key, fenceOf(l, name), got, h.rel(e.T))})
		}
	}
	return vs
}

// valueTerms returns the terms a value read back may come with, the value
// naming Campaign c, which won a term: c's own term (its Campaign's
// value, a Proclaim of its leadership); and for the value of a second
// Campaign of c's leader on its own Client (againValueOf), also the term
// of that Campaign's grant. That Campaign proclaims on c's leadership
// while it lasts (the same term), but once it has ended — lost, or
// resigned meanwhile — it is a candidate of its own, and may win a term
// of its own with this value (Campaign: "it ended meanwhile"; seed
// 396980891: lost during a clock fault, term 7555, the second Campaign
// won 7591, and observers rightly read the value with 7591). Its value
// may have been recorded on c's leadership first (a Proclaim that ran but
// whose reply came after the lease's local deadline): c's term stays
// allowed. known is false when such a second Campaign returned no term
// (it failed, perhaps after it had won and recorded its value: an
// observer may read the value with a term no grant reports).
func (h *history) valueTerms(c *callRec, value, name string) (terms []int64, known bool) {
	terms = []int64{c.result.Fences[0]}
	rem, ok := againOf(value)
	if !ok {
		return terms, true
	}
	if h.again == nil {
		h.again = map[string][]*callRec{}
		for _, a := range h.calls {
			if a.call.Reent && a.call.Lease != 0 {
				k := leaseKey(a.call.W, a.call.Lease)
				h.again[k] = append(h.again[k], a)
			}
		}
	}
	for _, a := range h.again[leaseKey(c.result.W, c.result.Lease)] {
		if a.call.Op%100 != rem || !slices.Equal(a.call.Names, []string{name}) {
			continue
		}
		if a.result == nil || a.result.K != kGrant || len(a.result.Fences) != 1 {
			return nil, false
		}
		if t := a.result.Fences[0]; !slices.Contains(terms, t) {
			terms = append(terms, t)
		}
	}
	return terms, true
}

// resigning reports whether a Resign of leadership l was in flight
// between from and to: through l, or through a lease of the same hold (a
// Campaign through l's Context, or on l's Client, which returns l's own
// Leadership: "Resign of either ends both"). The hold may then be gone at
// the server before Err says so, as after any Unlock that has run and not
// answered yet. (Found by a 3-minute soak: an inner Campaign's Resign ran
// while the outer one read Leader.)
func resigning(ls []*leaseRec, l *leaseRec, from, to int64) bool {
	for _, o := range ls {
		if !slices.Equal(o.grant.Owners, l.grant.Owners) {
			continue
		}
		for _, ev := range o.events {
			if ev.K == kUCall && ev.T <= to && (o.unlockOK == 0 || o.unlockOK >= from) {
				return true
			}
		}
	}
	return false
}

// checkObservers: the terms one observer is sent never go back. The
// term is the election's fence counter, which only grows, and each state
// an observer sends was read after the one before it. Observers may
// coalesce states, so none has to see every term; but a term below one
// already seen, or a term seen again after a state with nobody leading
// (its leadership had ended, and no leader comes back), is a state sent
// out of order or a leader that was not one.
func (h *history) checkObservers() []Violation {
	type observer struct {
		top  *Event // the state with the highest term so far
		gone *Event // a state with nobody leading, after top
	}
	obs := map[string]*observer{}
	var vs []Violation
	for i := range h.reads {
		e := &h.reads[i]
		if e.K != kObserve || len(e.Names) != 1 || len(e.Fences) != 1 {
			continue
		}
		k := fmt.Sprintf("%s/g%d/%s", e.W, e.G, e.Names[0])
		o := obs[k]
		if o == nil {
			o = &observer{}
			obs[k] = o
		}
		term := e.Fences[0]
		switch {
		case term == 0:
			if o.top != nil && o.gone == nil {
				o.gone = e
			}
			continue
		case o.top != nil && term < o.top.Fences[0]:
			vs = append(vs, Violation{Kind: "election", Cat: "election: an observer's term went back", T: e.T,
				Related: []Event{*o.top, *e},
				Msg: fmt.Sprintf("%q: observer %s was sent term %d (value %q) at %s, after term %d (value %q) at %s",
					e.Names[0], k, term, e.Msg, h.rel(e.T), o.top.Fences[0], o.top.Msg, h.rel(o.top.T))})
			continue
		case o.top != nil && term == o.top.Fences[0] && o.gone != nil:
			vs = append(vs, Violation{Kind: "election", Cat: "election: an observer's leader came back after nobody led", T: e.T,
				Related: []Event{*o.top, *o.gone, *e},
				Msg: fmt.Sprintf("%q: observer %s was sent term %d (value %q) at %s, then nobody leading at %s, then term %d again (value %q) at %s",
					e.Names[0], k, term, o.top.Msg, h.rel(o.top.T), h.rel(o.gone.T), term, e.Msg, h.rel(e.T))})
		}
		o.top, o.gone = e, nil
	}
	return vs
}
