// Package acquisition runs an acquire: the Acquisition of one Lock or
// TryLock of any kind, or a LockAll set — the deployment check, its
// attempts on the backend, the wait between them (woken by its Client's
// wake-ups, or polling), the hand-off a release may make to it, the undo
// of an acquire that fails with its outcome unknown, and the holds it
// takes (internal/hold).
//
// The arguments below are the proofs the package's code rests on; the
// code they justify points here by heading.
//
// # Acquires sent twice
//
// go-redis sends a call again when its reply has
// not come within its ReadTimeout (driver.Info.ResendAfter), and after
// its connection closed or reset at any time (a proxy restarting), which
// the reply then says (driver.Reply.SentTwice, the attempt's
// Outcome.SentTwice; dlock's own connections say it too); and the
// first copy's bytes may still reach the server after the second copy
// ran: the path stalled, and TCP delivers them later. When the second
// copy took the lock, that first copy may land after the lease's Unlock
// and, finding the lock free, take it again for a token nobody holds (the
// torture test saw it). So a lease whose acquire had an attempt that took
// ResendAfter or more, was sent twice, or failed with its outcome
// unknown, buries its token before its final release (hold.Hold.buryFirst),
// for as long as buryCall buries an undone acquire's; and an acquire
// that ends without the lock after such an attempt is undone as one whose
// outcome is unknown (Run: buried, then released), since a copy may still
// take the lock for its token after the call returned.
//
// Why this cannot grant twice, nor for nobody: every acquire script
// refuses a buried token first; the release is sent only once the bury
// has answered, so it runs after it; so a copy that runs after the
// release takes nothing, and one that runs before it finds its own token
// holding (lock.lua: it only lengthens the lease, which the release then
// ends). A copy later still than the burial takes what it takes for its
// own TTL at most, as a holder that crashed at once would; and so does
// one whose bury failed (the release is made all the same).
// The cost, a call, is paid only by leases whose acquire was that slow.
//
// # Hand-off
//
// A release that frees a Mutex (FairMutex, an Election's lock,
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
package acquisition
