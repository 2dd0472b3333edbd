package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"html"
	"strconv"
	"time"

	"github.com/dlock-go/dlock"
)

// The JSON of /api/snapshot and of each /events event: what the page
// draws. Durations are whole milliseconds, times RFC 3339 in UTC with
// milliseconds; a list is [] when empty, an owner null when its Client
// did not record one. Fields may be added, never renamed.

// errNoSnapshot is a refresh whose source answered neither a snapshot
// nor an error.
var errNoSnapshot = errors.New("dlock/web: the snapshot source answered nothing")

// viewJSON is the whole view.
type viewJSON struct {
	Title     string `json:"title"`
	At        string `json:"at"` // when the shown snapshot's pass began ("" if none yet)
	RefreshMs int64  `json:"refresh_ms"`
	Pattern   string `json:"pattern"`
	Limit     int    `json:"limit"`
	// More is how many matching locks were found beyond Limit and not
	// inspected.
	More int `json:"more"`
	Keys int `json:"keys"` // keys the pass walked
	// Error is the last refresh's error ("" if it succeeded): the rest is
	// then the last good snapshot's.
	Error      string         `json:"error"`
	AllowForce bool           `json:"allow_force"`
	Locks      []lockView     `json:"locks"`
	Waits      []waitView     `json:"waits"`
	Deadlocks  []deadlockView `json:"deadlocks"`
	Broken     []deadlockView `json:"broken"`
	Graph      graphView      `json:"graph"`
}

// lockView is one lock.
type lockView struct {
	Kind string `json:"kind"`
	// Name is the lock's name; one that is not UTF-8 Go-quoted
	// ("blob-\xff", quotes included: JSON would make its bytes U+FFFD,
	// the name of another lock), its bytes then in NameBytes (base64)
	Name      string       `json:"name"`
	NameBytes []byte       `json:"name_bytes,omitempty"`
	Held      bool         `json:"held"`
	TTLMs     int64        `json:"ttl_ms"` // 0: no key, -1: no expiry
	Fence     int64        `json:"fence"`
	Mode      string       `json:"mode"`     // rwmutex: read, write or ""
	KeptFor   string       `json:"kept_for"` // mutex: the waiter a free lock is kept for
	Capacity  int64        `json:"capacity"` // semaphore
	Free      int64        `json:"free"`     // semaphore
	Count     int64        `json:"count"`    // latch
	Value     string       `json:"value"`    // election: the leader's value
	Deadlock  bool         `json:"deadlock"` // in a deadlock cycle now
	Holders   []holderView `json:"holders"`
	Waiters   []waiterView `json:"waiters"` // in the order they will be served
}

// holderView is one holder.
type holderView struct {
	Token     string     `json:"token"`
	Side      string     `json:"side"`
	Holds     int64      `json:"holds"`
	Fence     int64      `json:"fence"`
	Label     string     `json:"label"`
	HeldForMs *int64     `json:"held_for_ms"` // null when unknown
	TTLMs     int64      `json:"ttl_ms"`
	Owner     *ownerView `json:"owner"`
}

// waiterView is one waiter.
type waiterView struct {
	Token     string     `json:"token"`
	Side      string     `json:"side"`
	Permits   int64      `json:"permits"`
	WaitingMs *int64     `json:"waiting_ms"` // null when unknown (readers)
	ExpiresMs int64      `json:"expires_ms"`
	Owner     *ownerView `json:"owner"`
}

// ownerView is who a Client is.
type ownerView struct {
	Client  string `json:"client"`
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	Program string `json:"program"`
	Label   string `json:"label"`
}

// refView names a lock, or a side of an RWMutex.
type refView struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	Side string `json:"side"`
}

// heldView is a lease a wait holds.
type heldView struct {
	refView
	Token string `json:"token"`
}

// waitView is an acquire that waits while it holds leases.
type waitView struct {
	Token     string     `json:"token"`
	Label     string     `json:"label"`
	Owner     *ownerView `json:"owner"`
	WaitingMs int64      `json:"waiting_ms"`
	For       []refView  `json:"for"`
	Holds     []heldView `json:"holds"`
	Permits   int64      `json:"permits"`
	Who       string     `json:"who"` // how the page names it
}

// deadlockView is a cycle of waits.
type deadlockView struct {
	Victim    string     `json:"victim"`     // the token of the wait that gives up
	VictimWho string     `json:"victim_who"` // how the page names it
	At        string     `json:"at"`
	Text      string     `json:"text"` // the cycle on one line (Deadlock.String)
	Waits     []waitView `json:"waits"`
}

// render makes the view of st: its snapshot (the last good one), and its
// error if it failed.
func (h *handler) render(st *state) []byte {
	v := viewJSON{Title: h.opts.Title, RefreshMs: h.opts.Refresh.Milliseconds(), Pattern: h.opts.Pattern,
		Limit: h.opts.Limit, AllowForce: h.opts.AllowForce,
		Locks: []lockView{}, Waits: []waitView{}, Deadlocks: []deadlockView{}, Broken: []deadlockView{}}
	if v.Limit == 0 {
		v.Limit = 1000
	}
	if st.err != nil {
		v.Error = st.err.Error()
	}
	if s := st.snap; s != nil {
		fillView(&v, s)
	} else {
		v.Graph = graphView{Nodes: []nodeView{}, Edges: []edgeView{}}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(true) // <, > and & as \u escapes: harmless, and safe should a client ever take it for HTML
	if err := enc.Encode(v); err != nil {
		// nothing in viewJSON can fail to encode; say so if it ever does
		b.Reset()
		msg, _ := json.Marshal("dlock/web: encoding the view: " + err.Error())
		b.WriteString(`{"error":` + string(msg) + `}`)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// fillView fills v from s.
func fillView(v *viewJSON, s *dlock.Snapshot) {
	v.At = timeText(s.At)
	v.More, v.Keys = s.More, s.Keys
	inCycle := map[lockKey]bool{}
	for _, d := range s.Deadlocks {
		for _, w := range d.Waits {
			for _, h := range w.Holds {
				inCycle[keyOf(h.LockRef)] = true
			}
		}
	}
	for _, l := range s.Locks {
		if l == nil {
			continue
		}
		v.Locks = append(v.Locks, lockOf(l, s.At, inCycle[lockKey{l.Kind, l.Name}]))
	}
	for _, w := range s.Waits {
		v.Waits = append(v.Waits, waitOf(w, s.At))
	}
	for _, d := range s.Deadlocks {
		v.Deadlocks = append(v.Deadlocks, deadlockOf(d, s.At))
	}
	for _, d := range s.Broken {
		v.Broken = append(v.Broken, deadlockOf(d, s.At))
	}
	v.Graph = buildGraph(s)
}

// lockOf is the view of one lock at now.
func lockOf(l *dlock.LockInfo, now time.Time, deadlocked bool) lockView {
	lv := lockView{Kind: string(l.Kind), Name: nameLabel(l.Name), Held: l.Held, TTLMs: ms(l.TTL), Fence: l.Fence, Mode: l.Mode,
		KeptFor: l.KeptFor, Capacity: l.Capacity, Free: l.Free, Count: l.Count, Value: l.Value, Deadlock: deadlocked,
		Holders: []holderView{}, Waiters: []waiterView{}}
	if lv.Name != l.Name {
		lv.NameBytes = []byte(l.Name)
	}
	if l.TTL < 0 {
		lv.TTLMs = -1
	}
	for _, h := range l.Holders {
		lv.Holders = append(lv.Holders, holderView{Token: h.Token, Side: h.Side, Holds: h.Holds, Fence: h.Fence,
			Label: h.Label, HeldForMs: age(now, h.Since), TTLMs: ms(h.TTL), Owner: ownerOf(h.Owner)})
	}
	for _, w := range l.Waiters {
		lv.Waiters = append(lv.Waiters, waiterView{Token: w.Token, Side: w.Side, Permits: w.Permits,
			WaitingMs: age(now, w.Since), ExpiresMs: ms(w.Expires), Owner: ownerOf(w.Owner)})
	}
	return lv
}

// waitOf is the view of one wait at now.
func waitOf(w dlock.Wait, now time.Time) waitView {
	wv := waitView{Token: w.Token, Label: w.Label, Owner: ownerOf(w.Owner), Permits: w.Permits,
		For: []refView{}, Holds: []heldView{}, Who: who(w)}
	if a := age(now, w.Since); a != nil {
		wv.WaitingMs = *a
	}
	for _, f := range w.For {
		wv.For = append(wv.For, refOf(f))
	}
	for _, h := range w.Holds {
		wv.Holds = append(wv.Holds, heldView{refView: refOf(h.LockRef), Token: h.Token})
	}
	return wv
}

// deadlockOf is the view of one cycle at now.
func deadlockOf(d dlock.Deadlock, now time.Time) deadlockView {
	dv := deadlockView{Victim: d.Victim, At: timeText(d.At), Text: d.String(), Waits: []waitView{}}
	for _, w := range d.Waits {
		dv.Waits = append(dv.Waits, waitOf(w, now))
		if w.Token == d.Victim {
			dv.VictimWho = who(w)
		}
	}
	return dv
}

// who names a wait as people know it: its label, else its owner's host,
// pid and program, else its token.
func who(w dlock.Wait) string {
	switch {
	case w.Label != "":
		return w.Label
	case w.Owner != nil && w.Owner.Label != "":
		return w.Owner.Label
	case w.Owner != nil:
		return w.Owner.Host + "/" + strconv.Itoa(w.Owner.PID) + " " + w.Owner.Program
	}
	return shortToken(w.Token)
}

// refOf is the view of a lock reference.
func refOf(r dlock.LockRef) refView {
	return refView{Kind: string(r.Kind), Name: nameLabel(r.Name), Side: r.Side}
}

// ownerOf is the view of an owner record (nil for none).
func ownerOf(o *dlock.Owner) *ownerView {
	if o == nil {
		return nil
	}
	return &ownerView{Client: o.Client, Host: o.Host, PID: o.PID, Program: o.Program, Label: o.Label}
}

// age is now-since in milliseconds (never negative), nil when since is
// unknown.
func age(now, since time.Time) *int64 {
	if since.IsZero() {
		return nil
	}
	a := max(now.Sub(since), 0).Milliseconds()
	return &a
}

// ms is d in whole milliseconds.
func ms(d time.Duration) int64 { return d.Milliseconds() }

// timeText formats t as the view does ("" for the zero time).
func timeText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// shortToken is the first 12 characters of a token.
func shortToken(t string) string {
	if len(t) > 12 {
		return t[:12]
	}
	return t
}

// fillTitle puts the title into the page, escaped.
func fillTitle(page []byte, title string) []byte {
	return bytes.ReplaceAll(page, []byte("{{title}}"), []byte(html.EscapeString(title)))
}
