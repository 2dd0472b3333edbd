package dlock

import (
	"strconv"
	"strings"
	"time"
)

// Hand-off. A release that frees a Mutex (FairMutex, an Election's lock,
// LockAll's Mutexes) may give it to the next waiter outright, in the same
// script (hand_on in scripts/lib_mutex.lua), so that the waiter takes it
// with no request of its own. Everything of it is here:
//
//   - Who may be handed a lock: a waiter that renews its lease (a fixed
//     lease has nothing to renew it from) on a deployment that hands off
//     (caps.handOff: one deployment with scripts, no replica sync, which
//     a hand-off would skip). It says so by its member,
//     '<member>:h<ttl ms>' (handoffMember), and the release gives it the
//     lock for that TTL.
//   - What it is told: the handoff message on its Client's channel,
//     '<member> <fence> <ms> <place>' (parseHandoff): the lock is its for
//     ms from the release, with fence, and the release consumed its place
//     that expired at place (server ms). The hub keeps a message for a
//     waiter that is between two waits (wake.go).
//   - What it does: take it with no request of its own (handedOver,
//     below, reads the message as an attempt's outcome), or, when the
//     message is not one it can count on, make an ordinary attempt, which
//     takes the lock if it is still this waiter's (lock.lua finds its
//     token in the hash).
//
// Why a hand-off honoured by handedOver cannot make two owners. The
// release ran on the server at some time R, while the waiter's place was
// live, and gave the waiter's token the lock until R+ms, with ms no longer
// than what was left of that place; nobody else can take it before then. The lease
// is counted from the send time of the attempt that made the place the
// message names: that attempt ran on the server before R (a place is
// consumed by the hand-off, so the one it names was made before it), so
// sent+ms, less the drift margin, comes before R+ms on the server: the
// lease ends locally before the hold ends there. What remains is to know
// that the message is about that place, and not about an older one whose
// hold has since expired — the waiter may have been paused (GC, SIGSTOP,
// a starved VM) past it, with the message unread in its socket, then made
// another attempt first. Every attempt that makes a place is told its
// expiry, and attempts of one acquire are made one after the other, so
// the waiter's latest place is the one made by the latest attempt whose
// reply has come. If the message names an older place, some attempt ran
// after the hand-off: had the handed hold still been there, that attempt
// would have found its token in the lock and taken it (replyHeld, and the
// acquire is over); it made a place instead, so the hold had ended: the
// message is stale and is dropped. Two places of one waiter never share
// an expiry: a new place is made after the handed hold ended, at least a
// millisecond after the place it consumed was made. A pause after the
// message is checked is the lease's own business: its local deadline
// passes, and Err says so.

// handoffMember is the member of a waiter that may be handed its lock for
// ttl (lib_mutex.lua reads the suffix).
func handoffMember(member string, ttl time.Duration) string {
	return member + ":h" + strconv.FormatInt(ttl.Milliseconds(), 10)
}

// handoff is a release's message to the waiter it handed the lock to
// (its first word, the waiter's member, routes it: tokenOf).
type handoff struct {
	fence int64
	ms    int64 // the lock is the waiter's for ms from the release
	place int64 // the expiry of the place the release consumed (server ms)
}

// parseHandoff reads a hand-off message; ok is false when msg is not one.
func parseHandoff(msg string) (m handoff, ok bool) {
	f := strings.Fields(msg)
	if len(f) != 4 {
		return m, false
	}
	var err1, err2, err3 error
	m.fence, err1 = strconv.ParseInt(f[1], 10, 64)
	m.ms, err2 = strconv.ParseInt(f[2], 10, 64)
	m.place, err3 = strconv.ParseInt(f[3], 10, 64)
	return m, err1 == nil && err2 == nil && err3 == nil && m.ms > 0
}

// place is what a waiter knows of its latest place in the queue: its
// expiry as the server told it, and when the attempt that made it was
// sent (zero: it has made none).
type place struct {
	expiry int64
	sent   time.Time
}

// handedOver reads msg, a hand-off to this waiter, whose latest place is
// p (see "Hand-off" above), as the outcome of an attempt: the lock taken
// with no request. ok is false when msg is not a hand-off, is not about
// p, or leaves too little time to count on (less than a quarter of the
// lease after the drift margin d): the caller then makes an attempt.
func handedOver(msg string, p place, d drift) (o outcome, ok bool) {
	m, ok := parseHandoff(msg)
	if !ok || p.sent.IsZero() || m.place != p.expiry {
		return o, false
	}
	granted := time.Duration(m.ms) * time.Millisecond
	if time.Until(p.sent.Add(granted-d.of(granted))) < granted/4 {
		return o, false
	}
	// Its validity counts from p.sent (above); its max hold from now, when
	// the hand-off has reached it: the release granted it before, for
	// granted, at most the max hold (a TTL is cut to it), so Redis's hold
	// ends before the max hold does, and renewals are cut to it (hold.go,
	// "Max hold").
	return outcome{granted: true, fence: m.fence, start: p.sent, ttl: granted, handed: true, maxFrom: time.Now()}, true
}
