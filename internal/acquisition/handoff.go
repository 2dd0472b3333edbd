package acquisition

import (
	"time"

	"github.com/dlock-go/dlock/internal/backend"

	"github.com/dlock-go/dlock/internal/protocol"
)

// Hand-off. A release that frees a Mutex (FairMutex, an Election's lock,
// LockAll's Mutexes) may give it to the next waiter outright, in the same
// script (hand_on in scripts/lib_mutex.lua), so that the waiter takes it
// with no request of its own. Everything of it is here:
//
//   - Who may be handed a lock: a waiter that renews its lease (a fixed
//     lease has nothing to renew it from) on a deployment that hands off
//     (backend.Caps.HandOff: one deployment with scripts, no replica sync, which
//     a hand-off would skip). It says so by its member,
//     '<member>:h<ttl ms>' (handoffMember), and the release gives it the
//     lock for that TTL.
//   - What it is told: the handoff message on its Client's channel,
//     protocol.HandOffMessage (protocol.ParseHandOff): the lock is its for ms from
//     the release, with fence. The hub keeps a message for a waiter that
//     is between two waits (internal/wake).
//   - What it knows of its place: every attempt that leaves it waiting in
//     the queue is told the value of the lock's fence counter as that
//     attempt found it (lock.lua's {0, wait, seen}); the acquire keeps
//     the latest (place, from the latest such attempt whose reply came).
//   - What it does: take it with no request of its own (HandedOver,
//     below, reads the message as an attempt's outcome), or, when the
//     message is not one it can count on, make an ordinary attempt, which
//     takes the lock if it is still this waiter's (lock.lua finds its
//     token in the hash).
//
// Why a hand-off honoured by HandedOver cannot make two owners. What it
// assumes, and nothing more: (1) scripts run one at a time on the server,
// each as one step; (2) the fence counter the lock shares never goes down
// (it is only INCR'd and never expires: the assumption every fence rests
// on; a restart that loses it loses the locks with it, which guarantees.md
// says breaks exclusion anyway); (3) Redis keeps a key given a TTL of ms (PEXPIRE) until its clock
// has moved ms, and its clock moves no faster than the drift margin
// allows for — the assumption every lease makes. Of the server's clock
// nothing else: nothing here is ordered or named by it, and a clock that
// stands still or steps back only keeps a hold longer. (A clock that
// steps forward breaks (3), for every lease alike: guarantees.md, "The
// server's clock".)
//
// The message says that a release, one script at some step R of the
// server, gave this acquire's token (its member carries it) the lock with
// fence f, the counter's value right after that script INCR'd it, and
// made the hold expire ms later; nobody else can take the lock while the
// hold is there (lock.lua takes only a lock whose hash is gone, or kept
// for the caller). The waiter honours it only when f is above p.Seen,
// the counter's value that its latest waiting attempt read (its reply has
// come): by (2) that attempt ran before R — one that ran after would have
// read f or more — and was sent before it ran, at p.Sent. So the lease,
// counted from p.Sent for ms less the drift margin, ends before the hold
// can expire by (3). And the hold stays this token's until then: only its
// expiry, a force (documented to break exclusion), or this acquire
// itself could end it, and this acquire does not release what it does
// not know it holds — an attempt of its own that finds its token in the
// lock takes it (the acquire is then over, with that attempt's outcome),
// and its undo (bury, release) runs only once the acquire has ended. A
// stale message — a hold handed while the waiter was paused (GC,
// SIGSTOP, a starved VM) past it, unread in its socket, since expired,
// while the waiter made another attempt first — is refused: that attempt
// ran after R and read f or more. A place is named by no expiry and no
// server time, so a clock that stands still or steps back cannot make an
// old message look new (with places named by their expiry it could:
// issue 33). A pause after the message is checked is the lease's own
// business: its local deadline passes, and Err says so.

// HandedOver reads msg, a hand-off to this waiter, whose latest place is
// p (see "Hand-off" above), as the outcome of an attempt: the lock taken
// with no request. ok is false when msg is not a hand-off, came before
// p's attempt ran (its fence is not above p.Seen), or leaves too little
// time to count on (less than a quarter of the lease after the drift
// margin d): the caller then makes an attempt.
func HandedOver(msg string, p backend.Place, d backend.Drift) (o backend.Outcome, ok bool) {
	m, ok := protocol.ParseHandOff(msg)
	if !ok || p.Sent.IsZero() || !p.Named || m.Fence <= p.Seen {
		return o, false
	}
	granted := time.Duration(m.MS) * time.Millisecond
	if time.Until(p.Sent.Add(granted-d.Of(granted))) < granted/4 {
		return o, false
	}
	// Its validity counts from p.Sent (above); its max hold from now, when
	// the hand-off has reached it: the release granted it before, for
	// granted, at most the max hold (a TTL is cut to it), so Redis's hold
	// ends before the max hold does, and renewals are cut to it (internal/hold/hold.go,
	// "Max hold").
	return backend.Outcome{Granted: true, Fence: m.Fence, Start: p.Sent, TTL: granted, Handed: true, MaxFrom: time.Now()}, true
}
