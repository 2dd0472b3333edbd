package torture

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Checks of the deadlock shapes (shapes_deadlock.go). An ErrDeadlock of
// the ordered shape is a false report. Of any other (the cycling shape's;
// a self-wait of another shape is not checked: its calls record no
// Hold), the recorded cycle must be one: every member a call of the
// history that carried those leases, waited for those locks, and was in
// flight when the victim looked (the victim's call began before its end,
// and the member's wait began before the victim's give-up); the members
// strongly connected (each waits for a lock another holds, and every one
// reaches every other); the victim the youngest, the call that gave up,
// and not before it had waited the delay. And no two calls gave up for
// one cycle: two victims that each name the other's wait.

// sinceSlack is how far a wait's Since (its Client's clock, in ms) may lie
// outside its call's span in the history (the same machine's clock).
const sinceSlack = 2 * time.Millisecond

func (h *history) checkDeadlocks() []Violation {
	var vs []Violation
	type report struct {
		c       *callRec
		rec     dlRecord
		members [][]*callRec // per wait: the calls it may be
	}
	var reports []report
	for _, c := range h.sortedCalls() {
		e, r := c.call, c.result
		if r == nil || r.K != kFail || r.EK != "deadlock" || !strings.HasPrefix(e.Scn, "deadlock") {
			continue
		}
		bad := func(cat, format string, args ...any) {
			vs = append(vs, Violation{Kind: "deadlock", Cat: "deadlock: " + cat, T: r.T, Related: []Event{e, *r},
				Msg: fmt.Sprintf("%s (%s, scenario %s, called %s, gave up %s): ", acquireWord(e), callKey(e.W, e.Op), e.Scn, h.rel(e.T), h.rel(r.T)) +
					fmt.Sprintf(format, args...) + "; cycle " + r.Cycle})
		}
		if e.Scn == "deadlock" {
			bad("a false report among waits taken in one global order",
				"%v, holding %v, got ErrDeadlock (%s), but every wait of the shape holds only locks ordered below those it waits for: no cycle can close", e.Names, e.Hold, r.Err)
		}
		var rec dlRecord
		if err := json.Unmarshal([]byte(r.Cycle), &rec); err != nil || len(rec.Waits) == 0 {
			bad("no cycle", "ErrDeadlock without a *DeadlockError naming a cycle (%q)", r.Err)
			continue
		}
		if time.Duration(r.T-e.T) < dlDelay-sinceSlack {
			bad("gave up before the delay", "gave up %v after its call, before the delay %v", time.Duration(r.T-e.T), dlDelay)
		}
		// The victim: the youngest, and this call.
		vi := -1
		for i, w := range rec.Waits {
			if w.Token == rec.Victim {
				vi = i
			}
		}
		if vi < 0 {
			bad("victim not in the cycle", "the victim %s is none of the cycle's waits", rec.Victim)
			continue
		}
		for i, w := range rec.Waits {
			if i != vi && dlYounger(w, rec.Waits[vi]) {
				bad("victim not the youngest", "the victim …%s (since %s) is not the youngest: …%s began waiting at %s",
					tail8(rec.Victim), h.rel(rec.Waits[vi].Since), tail8(w.Token), h.rel(w.Since))
				break
			}
		}
		if !dlIsCall(rec.Waits[vi], c) {
			bad("victim not the call that gave up", "the victim's wait (for %v, holding %v) is not this call (for %v, holding %v)",
				rec.Waits[vi].For, rec.Waits[vi].Holds, e.Names, e.Hold)
		}
		// Strongly connected: i waits for a lock that j holds.
		n := len(rec.Waits)
		edge := func(i, j int) bool {
			for _, f := range rec.Waits[i].For {
				if slices.ContainsFunc(rec.Waits[j].Holds, func(hd string) bool { return heldName(hd) == f }) {
					return true
				}
			}
			return false
		}
		for i := range n {
			seen := map[int]bool{i: true}
			for todo := []int{i}; len(todo) > 0; {
				x := todo[0]
				todo = todo[1:]
				for j := range n {
					if !seen[j] && edge(x, j) {
						seen[j] = true
						todo = append(todo, j)
					}
				}
			}
			if len(seen) < n || n == 1 && !edge(0, 0) {
				bad("not a cycle", "wait %d (for %v, holding %v) does not reach every wait of the cycle through the locks they hold (a chain, not a cycle)",
					i, rec.Waits[i].For, rec.Waits[i].Holds)
				break
			}
		}
		// Every member was waiting.
		rep := report{c: c, rec: rec}
		for _, w := range rec.Waits {
			var ms []*callRec
			for _, x := range h.calls {
				if !dlIsCall(w, x) {
					continue
				}
				end := h.waitEnd(x)
				// in flight while the victim looked: begun before the
				// victim gave up, not ended before the victim began
				if x.call.T <= r.T && end >= e.T {
					ms = append(ms, x)
				}
			}
			if len(ms) == 0 {
				bad("a member that was not waiting", "no call of the history waited for %v holding %v since %s, in flight between the victim's call and its give-up",
					w.For, w.Holds, h.rel(w.Since))
			}
			rep.members = append(rep.members, ms)
		}
		reports = append(reports, rep)
	}
	// At most one victim per cycle.
	names := func(rp report, c *callRec) bool {
		return slices.ContainsFunc(rp.members, func(ms []*callRec) bool { return slices.Contains(ms, c) })
	}
	for i, a := range reports {
		for _, b := range reports[i+1:] {
			if names(a, b.c) && names(b, a.c) {
				vs = append(vs, Violation{Kind: "deadlock", Cat: "deadlock: two members of one cycle gave up", T: b.c.result.T,
					Related: []Event{a.c.call, *a.c.result, b.c.call, *b.c.result},
					Msg: fmt.Sprintf("%s and %s both gave up with ErrDeadlock (at %s and %s), each naming the other's wait in its cycle: %s / %s",
						callKey(a.c.call.W, a.c.call.Op), callKey(b.c.call.W, b.c.call.Op), h.rel(a.c.result.T), h.rel(b.c.result.T),
						a.c.result.Cycle, b.c.result.Cycle)})
			}
		}
	}
	return vs
}

// dlYounger is internal/deadlock's victim order: Since, then Token.
func dlYounger(a, b dlWait) bool {
	sa, sb := a.Since/int64(time.Millisecond), b.Since/int64(time.Millisecond)
	if sa != sb {
		return sa > sb
	}
	return a.Token > b.Token
}

// tail8 is a token's last 8 characters (a Client's tokens share their
// first half).
func tail8(tok string) string { return tok[max(0, len(tok)-8):] }

// heldName is the name of a recorded hold ("name|side|token").
func heldName(hd string) string {
	n, _, _ := strings.Cut(hd, "|")
	return n
}

// dlIsCall reports whether wait w can be call c: c waited for w's locks,
// carried exactly w's holds (names and sides; tokens where c knows them),
// and w began waiting within c's span.
func dlIsCall(w dlWait, c *callRec) bool {
	e := c.call
	if !e.Wait || len(e.Hold) != len(w.Holds) || !slices.Equal(slices.Sorted(slices.Values(e.Names)), slices.Sorted(slices.Values(w.For))) {
		return false
	}
	for _, ch := range e.Hold {
		cn, crest, _ := strings.Cut(ch, "|")
		cside, ctok, _ := strings.Cut(crest, "|")
		if !slices.ContainsFunc(w.Holds, func(wh string) bool {
			wn, wrest, _ := strings.Cut(wh, "|")
			wside, wtok, _ := strings.Cut(wrest, "|")
			return wn == cn && wside == cside && (ctok == "" || ctok == wtok)
		}) {
			return false
		}
	}
	if w.Since < e.T-int64(sinceSlack) {
		return false
	}
	if c.result != nil && w.Since > c.result.T+int64(sinceSlack) {
		return false
	}
	return true
}
