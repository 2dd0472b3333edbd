package dlock

import (
	"context"
	"sync"

	"github.com/dlock-go/dlock/internal/protocol"

	"github.com/dlock-go/dlock/driver"
)

// backend is the deployment a Client runs on, chosen once by New or
// NewQuorum: one Redis deployment with scripts (single.go; a cluster and
// replica sync are properties of it), the script-free mode (plain.go), or
// a quorum of independent masters (quorum.go). The primitives, the
// acquire path and the watchdog go through it and never ask which one it
// is. Below it, a Driver (driver.go) reaches Redis through a client library.
type backend interface {
	// caps says what the deployment can do: every call site asks it, and
	// no backend is asked which one it is.
	caps() caps
	// attempt returns a lock's protocol on this deployment and its
	// acquire attempts, which report outcomes (data: the acquire path
	// makes the holds).
	attempt(a *attemptSpec) (holdOps, attemptFunc)
	// grant runs an operation that grants or extends a hold (with replica
	// sync, the acknowledgement is part of it).
	grant(ctx context.Context, o op) driver.Reply
	// run runs any other operation of a hold (a release, a TTL, an inner
	// unlock): every operation goes through the backend.
	run(ctx context.Context, o op) driver.Reply
	// batch runs many operations together (the watchdog's renewals, with
	// grant set; Close's releases) and returns one reply per operation.
	batch(ctx context.Context, ops []op, grant bool) []driver.Reply
	// everywhere runs a script call on every node, for its effect, and
	// returns the first error (a
	// waiter leaving the queues).
	everywhere(ctx context.Context, c protocol.Call) error
	// close waits for calls that outlived their operation (a quorum's
	// slow nodes).
	close()
}

// attemptSpec is what a backend is told of an acquire: data only.
type attemptSpec struct {
	k    *protocol.Keys
	what string  // the primitive, for errors
	p    holdOps // its protocol on a deployment with scripts
	need int     // permits a semaphore waits for; 0 for locks
	// queue: a Lock's attempts carry member (a place in the queue)
	queue bool
	// call is the acquire script call of one attempt (request.call).
	call          func(token, member string, placed bool, cfg lockConfig) protocol.Call
	token, member string
	cfg           lockConfig
}

// caps is what a deployment can do, decided once when the Client is made.
type caps struct {
	// all: every primitive, with re-entry (scripts on one deployment);
	// else only a Mutex, re-entrant if reentry.
	all, reentry bool
	// notThere says why what is not supported here (errNeedsScripts,
	// errNotOnQuorum).
	notThere func(what string) error
	// handOff: a release may hand a freed Mutex to its next waiter
	// (handoff.go): one deployment with scripts and no replica sync.
	handOff bool
	// reserve: a freed Mutex is kept for the waiter told (not on a
	// quorum, whose nodes' queues may disagree on who is first).
	reserve bool
	// directed: waiters register in Redis and a release wakes only the
	// one (or those) whose turn it is, on its Client's own channel. Not
	// without scripts, where a release is published on the lock's channel.
	directed bool
	// oneScript: a set of Mutexes is taken by one script call (LockAll):
	// one node with scripts.
	oneScript bool
	// bury: an acquire given up on buries its token (bury.lua) so that its
	// late attempts take nothing. Every deployment with scripts.
	bury bool
}

// supports returns an error when the deployment cannot run what: a
// primitive ("Semaphore", ...) or "re-entry". Every deployment runs a
// Mutex.
func (c caps) supports(what string) error {
	if c.all || what == "Mutex" || what == "re-entry" && c.reentry {
		return nil
	}
	return c.notThere(what)
}

// sideBySide runs each operation on its own, all at once: for operations
// that cannot share a pipeline (transactions).
func sideBySide(ctx context.Context, r driver.Driver, ops []op) []driver.Reply {
	out := make([]driver.Reply, len(ops))
	var wg sync.WaitGroup
	for i, o := range ops {
		wg.Go(func() { out[i] = o.Run(ctx, r) })
	}
	wg.Wait()
	return out
}
