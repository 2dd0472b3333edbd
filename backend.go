package dlock

import (
	"context"
	"sync"
)

// backend is the deployment a Client runs on, chosen once by New or
// NewQuorum: one Redis deployment with scripts (single.go; a cluster and
// replica sync are properties of it), the script-free mode (plain.go), or
// a quorum of independent masters (quorum.go). The primitives, the
// acquire path and the watchdog go through it and never ask which one it
// is. Below it, a Driver (driver.go) reaches Redis through a client library.
type backend interface {
	// supports returns an error when the deployment cannot run what: a
	// primitive ("Semaphore", ...) or "re-entry". Every backend runs a
	// Mutex.
	supports(what string) error
	// attempt returns a request's protocol on this deployment and one
	// acquire attempt of it.
	attempt(c *Client, r *request, token, member string, cfg lockConfig) (protocol, attemptFunc)
	// handsOff reports whether a released mutex may be handed to its next
	// waiter by the release itself (lib_mutex.lua).
	handsOff() bool
	// grant runs an operation that grants or extends a hold (with replica
	// sync, the acknowledgement is part of it).
	grant(ctx context.Context, o op) Reply
	// batch runs many operations together (the watchdog's renewals, with
	// grant set; Close's releases) and returns one reply per operation.
	batch(ctx context.Context, ops []op, grant bool) []Reply
	// everywhere runs a script call on every node, for its effect, and
	// returns the first error (a
	// waiter leaving the queues).
	everywhere(ctx context.Context, c call) error
	// oneScript reports whether a set of Mutexes can be taken by one
	// script call (LockAll): one node with scripts.
	oneScript() bool
	// close waits for calls that outlived their operation (a quorum's
	// slow nodes).
	close()
}

// sideBySide runs each operation on its own, all at once: for operations
// that cannot share a pipeline (transactions).
func sideBySide(ctx context.Context, r Driver, ops []op) []Reply {
	out := make([]Reply, len(ops))
	var wg sync.WaitGroup
	for i, o := range ops {
		wg.Go(func() { out[i] = o.run(ctx, r) })
	}
	wg.Wait()
	return out
}
