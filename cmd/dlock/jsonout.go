package main

import (
	"encoding/json"
	"errors"
	"io"
	"time"

	"github.com/dlock-go/dlock"
)

// The JSON of inspect --json and ls --json: an array of lock objects, the
// same for both (a name may have locks of several kinds). The schema is
// documented in docs/cli.md ("From the shell"); it is stable:
// fields may be added, never renamed, removed or given another meaning.
// Every field is always present: durations in whole milliseconds, times
// as RFC 3339 strings in UTC with milliseconds (null when unknown), an
// owner null when its Client did not record one, lists [] when empty.

// lockJSON is one lock.
type lockJSON struct {
	Kind     string       `json:"kind"` // mutex, rwmutex, semaphore, latch, election
	Name     string       `json:"name"`
	Key      string       `json:"key"`
	Held     bool         `json:"held"`
	TTLMs    int64        `json:"ttl_ms"` // 0: no key, -1: no expiry
	Fence    int64        `json:"fence"`
	Mode     string       `json:"mode"`     // rwmutex: read, write, "" when free
	KeptFor  string       `json:"kept_for"` // mutex: the waiter a free lock is kept for
	Capacity int64        `json:"capacity"` // semaphore
	Free     int64        `json:"free"`     // semaphore
	Count    int64        `json:"count"`    // latch
	Value    string       `json:"value"`    // election: the leader's value, "" when nobody leads
	Holders  []holderJSON `json:"holders"`
	Waiters  []waiterJSON `json:"waiters"` // in the order they will be served
}

// holderJSON is one holder.
type holderJSON struct {
	Token string     `json:"token"`
	Side  string     `json:"side"` // rwmutex: read or write
	Holds int64      `json:"holds"`
	Fence int64      `json:"fence"`
	Label string     `json:"label"` // the hold's (WithLabel); the Client's is the owner's
	Since *string    `json:"since"`
	TTLMs int64      `json:"ttl_ms"`
	Owner *ownerJSON `json:"owner"`
}

// waiterJSON is one waiter.
type waiterJSON struct {
	Token     string     `json:"token"`
	Side      string     `json:"side"`
	Permits   int64      `json:"permits"`
	Since     *string    `json:"since"`
	ExpiresMs int64      `json:"expires_ms"`
	Owner     *ownerJSON `json:"owner"`
}

// ownerJSON is who a holder's or waiter's Client is.
type ownerJSON struct {
	Client  string  `json:"client"`
	Host    string  `json:"host"`
	PID     int     `json:"pid"`
	Program string  `json:"program"`
	Label   string  `json:"label"`
	Started *string `json:"started"`
}

// jsonTime is the layout of the times: RFC 3339, UTC, milliseconds.
const jsonTime = "2006-01-02T15:04:05.000Z07:00"

// timeJSON formats t, or returns nil (null) when it is not known.
func timeJSON(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(jsonTime)
	return &s
}

// msJSON converts a duration to milliseconds: the -1 of "no expiry"
// stays -1, an overdue one (negative) is 0, and a positive one is
// rounded up, so that 0 means "none left" and nothing else.
func msJSON(d time.Duration) int64 {
	switch {
	case d == -1:
		return -1
	case d <= 0:
		return 0
	case d < time.Millisecond:
		return 1
	}
	return d.Milliseconds()
}

// ownerOf converts an owner.
func ownerOf(o *dlock.Owner) *ownerJSON {
	if o == nil {
		return nil
	}
	return &ownerJSON{Client: o.Client, Host: o.Host, PID: o.PID, Program: o.Program, Label: o.Label, Started: timeJSON(o.Started)}
}

// toJSON converts locks to the JSON schema.
func toJSON(locks []*dlock.LockInfo) []lockJSON {
	out := make([]lockJSON, 0, len(locks))
	for _, l := range locks {
		j := lockJSON{Kind: string(l.Kind), Name: l.Name, Key: l.Key, Held: l.Held, TTLMs: msJSON(l.TTL),
			Fence: l.Fence, Mode: l.Mode, KeptFor: l.KeptFor, Capacity: l.Capacity, Free: l.Free, Count: l.Count, Value: l.Value,
			Holders: make([]holderJSON, 0, len(l.Holders)), Waiters: make([]waiterJSON, 0, len(l.Waiters))}
		for _, h := range l.Holders {
			j.Holders = append(j.Holders, holderOf(h))
		}
		for _, w := range l.Waiters {
			j.Waiters = append(j.Waiters, waiterJSON{Token: w.Token, Side: w.Side, Permits: w.Permits,
				Since: timeJSON(w.Since), ExpiresMs: msJSON(w.Expires), Owner: ownerOf(w.Owner)})
		}
		out = append(out, j)
	}
	return out
}

// printJSON writes locks as an indented JSON array and a newline.
func printJSON(stdout, stderr io.Writer, locks []*dlock.LockInfo) int {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(toJSON(locks)); err != nil {
		complain(stderr, "writing JSON: %v", err)
		return exitFail
	}
	return exitOK
}

// holderOf converts a holder.
func holderOf(h dlock.Holder) holderJSON {
	return holderJSON{Token: h.Token, Side: h.Side, Holds: h.Holds, Fence: h.Fence, Label: h.Label,
		Since: timeJSON(h.Since), TTLMs: msJSON(h.TTL), Owner: ownerOf(h.Owner)}
}

// busyHolderJSON is the holder a refused acquire's err (a
// *dlock.BusyError) names, for run's conflict event; nil (null) when it
// names none.
func busyHolderJSON(err error) *holderJSON {
	var be *dlock.BusyError
	if !errors.As(err, &be) || be.Holder == nil {
		return nil
	}
	j := holderOf(*be.Holder)
	return &j
}
