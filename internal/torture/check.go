package torture

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// Violation is one failed check.
type Violation struct {
	Kind    string // safety, fence, capacity, wait, ctx, phase, election, held, fatal, process
	Cat     string // a finer category, to tell bugs apart in the digest
	T       int64  // when it happened (when it became a violation)
	Msg     string
	Leases  []string // keys of the leases involved
	Related []Event  // other events worth printing
}

// owner is one owner of one name: the leases with one token on it (the
// outer lease and those re-entered through it; for an RWMutex, also a
// writer's read hold).
type owner struct {
	name    string
	token   string
	side    string // for safety: "w", "r" or "" (exclusive kinds)
	fence   int64
	grant   int64 // first grant (t after the acquire returned)
	call    int64 // call of the acquire of that first grant
	belief  int64 // last belief
	permits int
	leases  []*leaseRec
}

// owners groups the grants of one name by token (and side if bySide).
func (h *history) owners(name string, bySide bool) ([]*owner, []Violation) {
	var vs []Violation
	m := map[string]*owner{}
	var out []*owner
	for _, l := range h.leasesOf(name) {
		for i, n := range l.grant.Names {
			if n != name {
				continue
			}
			side := ""
			if bySide && i < len(l.grant.Sides) {
				side = l.grant.Sides[i]
			}
			tok, fence := l.grant.Owners[i], l.grant.Fences[i]
			o := m[tok+"/"+side]
			if o == nil {
				o = &owner{name: name, token: tok, side: side, fence: fence, grant: l.grant.T, call: l.call.T,
					permits: l.grant.Permits}
				m[tok+"/"+side] = o
				out = append(out, o)
			} else if o.fence != fence {
				vs = append(vs, Violation{Kind: "fence", Cat: "fence: re-entry changed the fence", T: l.grant.T, Leases: []string{o.leases[0].key, l.key},
					Msg: fmt.Sprintf("%q: one owner (token %.8s…) got fences %d and %d (re-entry must return the outer lease's fence)",
						name, tok, o.fence, fence)})
			}
			if !l.grant.Reent && l.grant.T < o.grant {
				o.grant, o.call = l.grant.T, l.call.T
			}
			o.belief = max(o.belief, l.belief)
			o.leases = append(o.leases, l)
		}
	}
	return out, vs
}

// nestedIn reports whether r is a read taken inside w's write hold:
// through a lease's context (re-entry), by the same Client of the same
// worker. Such a read is a hold of its own (a token and a fence of its
// own) that w does not exclude.
func nestedIn(r, w *owner) bool {
	if r.side != "r" || w.side != "w" || len(w.leases) == 0 {
		return false
	}
	for _, l := range r.leases {
		if !l.grant.Reent || l.w != w.leases[0].w || l.grant.Client != w.leases[0].grant.Client {
			return false
		}
	}
	return true
}

// checkSafety: no owner may have believed it held a name after a later
// owner (higher fence) of it had been granted, for exclusive kinds and
// for an RWMutex writer against anyone.
func (h *history) checkSafety(name string) []Violation {
	kind := lockKind(name)
	if kind == "sem" {
		return nil
	}
	os, vs := h.owners(name, kind == "rw")
	slices.SortFunc(os, func(a, b *owner) int { return cmpInt(a.fence, b.fence) })
	// The owner with the latest belief among lower fences: all owners, and
	// writers only (readers conflict only with writers).
	var anyMax, wMax *owner
	for i := 0; i < len(os); {
		j := i
		for j < len(os) && os[j].fence == os[i].fence {
			j++
		}
		for _, b := range os[i:j] {
			a := anyMax
			if kind == "rw" && b.side == "r" {
				a = wMax
			}
			if a != nil && a.belief > b.grant && !nestedIn(b, a) {
				vs = append(vs, Violation{Kind: "safety", Cat: "safety: two owners at once on " + kind + " " + name, T: b.grant, Leases: append(keysOf(a), keysOf(b)...),
					Msg: fmt.Sprintf("%q: two owners at once: %s (fence %d) believed it held the lock at %s (Err() == nil), "+
						"%v after %s (fence %d) had been granted it at %s",
						name, ownerName(a), a.fence, h.rel(a.belief), time.Duration(a.belief-b.grant),
						ownerName(b), b.fence, h.rel(b.grant))})
			}
		}
		for _, b := range os[i:j] {
			if anyMax == nil || b.belief > anyMax.belief {
				anyMax = b
			}
			if b.side != "r" && (wMax == nil || b.belief > wMax.belief) {
				wMax = b
			}
		}
		i = j
	}
	return vs
}

// checkFences: different owners never share a fence, and an owner whose
// acquire was called after another owner's acquire had returned has a
// higher fence.
func (h *history) checkFences(name string) []Violation {
	os, vs := h.owners(name, false)
	byFence := map[int64]*owner{}
	for _, o := range os {
		if p := byFence[o.fence]; p != nil {
			vs = append(vs, Violation{Kind: "fence", Cat: "fence: one fence, two owners", T: max(p.grant, o.grant), Leases: append(keysOf(p), keysOf(o)...),
				Msg: fmt.Sprintf("%q: fence %d given to two owners, %s and %s", name, o.fence, ownerName(p), ownerName(o))})
			continue
		}
		byFence[o.fence] = o
	}
	sorted := slices.Clone(os)
	slices.SortFunc(sorted, func(a, b *owner) int { return cmpInt(a.grant, b.grant) })
	best := make([]*owner, len(sorted)) // the highest fence among sorted[:i+1]
	for i, o := range sorted {
		best[i] = o
		if i > 0 && best[i-1].fence > o.fence {
			best[i] = best[i-1]
		}
	}
	for _, b := range os {
		i := sort.Search(len(sorted), func(i int) bool { return sorted[i].grant >= b.call })
		if i == 0 {
			continue
		}
		if a := best[i-1]; a.token != b.token && a.fence >= b.fence {
			vs = append(vs, Violation{Kind: "fence", Cat: "fence: not increasing", T: b.grant, Leases: append(keysOf(a), keysOf(b)...),
				Msg: fmt.Sprintf("%q: fence %d of %s, whose acquire was called at %s, is not above fence %d of %s, granted before at %s",
					name, b.fence, ownerName(b), h.rel(b.call), a.fence, ownerName(a), h.rel(a.grant))})
		}
	}
	return vs
}

// checkCapacity: at no instant did holders believe they held more
// permits of a semaphore than its capacity.
func (h *history) checkCapacity(name string) []Violation {
	if lockKind(name) != "sem" {
		return nil
	}
	os, _ := h.owners(name, false)
	type edge struct {
		t     int64
		delta int
		o     *owner
	}
	var edges []edge
	for _, o := range os {
		if o.belief > o.grant {
			edges = append(edges, edge{o.grant, o.permits, o}, edge{o.belief, -o.permits, o})
		}
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := cmpInt(a.t, b.t); c != 0 {
			return c
		}
		return a.delta - b.delta // ends first
	})
	var vs []Violation
	used := 0
	in := map[*owner]bool{}
	for _, e := range edges {
		used += e.delta
		if e.delta < 0 {
			delete(in, e.o)
			continue
		}
		in[e.o] = true
		if used > semCap[name] {
			var ks []string
			msg := fmt.Sprintf("%q: %d permits believed held at %s, capacity %d:", name, used, h.rel(e.t), semCap[name])
			for o := range in {
				ks = append(ks, keysOf(o)...)
				msg += fmt.Sprintf(" %s (%d permits, granted %s, believed until %s);", ownerName(o), o.permits, h.rel(o.grant), h.rel(o.belief))
			}
			vs = append(vs, Violation{Kind: "capacity", T: e.t, Msg: msg, Leases: ks})
		}
	}
	return vs
}

func keysOf(o *owner) []string {
	var ks []string
	for _, l := range o.leases {
		ks = append(ks, l.key)
	}
	return ks
}

func ownerName(o *owner) string {
	s := fmt.Sprintf("owner %.8s… (lease %s", o.token, o.leases[0].key)
	if o.side != "" {
		s += ", side " + o.side
	}
	return s + ")"
}

// checkInversion: on an exclusive lock (Mutex, FairMutex, Election; an
// RWMutex when either side is a writer) no lease may begin — its acquire
// return with Err() nil — after a higher fence was granted. Fence b > a was taken
// at the server after a, so a had been lost (expired, released) by then:
// a Lock that returns a afterwards hands out a lock someone else holds,
// whatever the wall-clock order of the two returns. Re-entries keep their
// outer lease's fence and are not beginnings; Err() is checked right after
// the return, so a lease that came back already lost is not counted.
func (h *history) checkInversion(name string) []Violation {
	kind := lockKind(name)
	if kind == "sem" {
		return nil
	}
	type gr struct {
		l     *leaseRec
		side  string
		token string
		fence int64
	}
	var vs []Violation
	var maxAny, maxW *gr                 // the highest fence granted so far: by anyone, by a writer
	for _, l := range h.leasesOf(name) { // by grant time
		i := slices.Index(l.grant.Names, name)
		if i < 0 || l.grant.Reent || i >= len(l.grant.Fences) {
			continue
		}
		g := &gr{l: l, token: l.grant.Owners[i], fence: l.grant.Fences[i]}
		if kind == "rw" && i < len(l.grant.Sides) {
			g.side = l.grant.Sides[i]
		}
		above := maxAny
		if g.side == "r" {
			above = maxW // readers do not exclude readers
		}
		if above != nil && above.fence > g.fence && above.token != g.token && l.grant.EK == "" {
			what := "Lock"
			switch {
			case len(l.grant.Names) > 1:
				what = "LockAll"
			case kind == "election":
				what = "Campaign"
			}
			vs = append(vs, Violation{Kind: "safety", Cat: "safety: fence inversion on " + kind + " " + name,
				T: l.grant.T, Leases: []string{above.l.key, l.key},
				Msg: fmt.Sprintf("%q: fence inversion: a %s (%s, scenario %s, called %s) returned lease %s with fence %d and Err() nil at %s, "+
					"%v after fence %d had been granted to lease %s at %s (a lower fence can only begin before a higher one)",
					name, what, callKey(l.w, l.grant.Op), l.grant.Scn, h.rel(l.call.T), l.key, g.fence, h.rel(l.grant.T),
					time.Duration(l.grant.T-above.l.grant.T), above.fence, above.l.key, h.rel(above.l.grant.T))})
		}
		if maxAny == nil || g.fence > maxAny.fence {
			maxAny = g
		}
		if g.side != "r" && (maxW == nil || g.fence > maxW.fence) {
			maxW = g
		}
	}
	return vs
}
