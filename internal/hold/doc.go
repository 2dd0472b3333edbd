// Package hold keeps a Client's holds: a hold of one lock (its token,
// fence, count and sequence; re-entry, Extend, Unlock, Proclaim's
// record), a lease's End, and the Keeper that makes, watches, renews
// (the watchdog and its time-ordered schedules), ends and releases
// them, and undoes an acquire that failed.
//
// The arguments below are the proofs the package's code rests on; the
// code they justify points here by heading.
//
// # Late commands
//
// A command that the client gave up on is not a command
// the server will not run: go-redis gives up when the ctx ends or its
// ReadTimeout passes and closes the connection, but bytes already on
// their way may still reach the server, late (TCP holds them while a path
// stalls, then delivers them); and go-redis sends a call again when it
// lost the reply, so the server may run it twice. So every command that
// changes a hold after it was taken — a renewal, Extend, a re-entry, an
// inner unlock, Proclaim — carries its place in the hold's sequence
// (next: one more than the last, under h.mu), and the scripts keep, in
// the hold (its place field, lib_mutex.lua; a hash field 'q:<token>' for
// the other kinds), the highest place that ran (in_order,
// scripts/lib_queue.lua). A command whose place is below it is refused
// (STALE) and changes nothing; a copy of the one that ran answers done
// and changes nothing. A mutex's renewal that only lengthens (renew.lua
// with Exact unset: the watchdog's, while no Extend is unsure) is checked
// against the place kept but keeps none of its own: it is the one
// command that changes neither the value nor any lease the holder counts
// on to something shorter, so whatever runs after it — a copy of it, an
// older renewal, a late command it would have refused — finds what it
// would have found had the renewal not run, but for a longer lease, and
// no confirmation is taken from it to settle an Extend (watchdog.due
// sends an exact one, which keeps its place, while one is unsure; settle
// forgets only those below the renewal's place, and an Extend given up
// on after it was sent has a higher one). Keeping none spares each
// renewal a rewrite of the hold (issue 47: 100 000 leases are 100 000
// renewals a second at a 3 s TTL). What that gives, for any order of
// arrival:
//
//   - No command can shorten a lease the holder counts on. The holder
//     counts on a confirmation: a command C with place c that ran, sent at
//     start, setting the lease to at least ttl from when it ran (every
//     renewal and re-entry only lengthens; Extend sets exactly d). After
//     C ran, a command with a place below c never runs; one with a place
//     above c was sent by this client after C was given its place, and
//     is an Extend (the only command that may shorten), whose d the hold
//     takes into account from its own start, whether it answered
//     (extend) or not (mayHaveSet, which caps every later confirmation by
//     d until a command with a higher place is confirmed: then the Extend
//     can no longer run), or a renewal sent while such an Extend was
//     unsure, which sets the lease to exactly its ttl (watchdog.due): its
//     start+ttl is no earlier than C's start+ttl (the same TTL from a
//     later start, or both cut to the same max hold; after an Extend
//     the hold counts on the Extend's own), so it shortens only what a
//     late Extend added, which the hold never counted on.
//   - No command removes another lease's hold: each hold has its own
//     token, and every command names its token (a read inside a write has
//     a token of its own; re-entered leases share a hold and its count,
//     which the commands set, not add to, in sequence order).
//   - No command overwrites a newer value (Proclaim): a later Proclaim
//     has a higher place.
//   - A final release needs no place: it ends the hold, and every later
//     arrival finds no token and changes nothing.
//
// A STALE reply only means a later command ran: an Extend, re-entry or
// Proclaim that meets one (a renewal sent meanwhile) is sent again with a
// new place (inOrder); a renewal that meets one confirms nothing.
//
// # Unknown outcomes
//
// A call whose reply did not come (a read timeout: the
// server busy longer than the client's ReadTimeout; a connection closed
// or reset after the call was sent) may have run or not. A call that is
// safe twice — a final release (its copy answers done when it ran: its
// receipt, or the fence nobody moved, unlock.lua's "Sent again"), and
// every command in a hold's sequence, sent again with the same place (a
// renewal, Extend, a re-entry, an inner unlock, Proclaim: its copy
// answers 'again', done) — is asked again while ctx lasts, up to
// askTries calls in all, and the caller is told what happened, not
// that the reply was lost (issue 45: a Semaphore's Unlock whose reply
// came after the ReadTimeout returned an i/o timeout although the permit
// was free). A call never sent (a connection refused) and a reply
// from Redis are outcomes known: they are returned as they are. When the
// last try's outcome is unknown too, the caller gets its error (and a
// release goes on in the background, as before).
//
// A copy that answers "not held" can only misreport a release that ran
// (a Mutex's release nobody waited for leaves no receipt; its copy says
// done only while the shared fence counter has not moved: on a busy
// server it says not held), never report one that did not run as done.
package hold
