package backend

import (
	"context"
	"sync"

	"github.com/dlock-go/dlock/internal/protocol"

	"github.com/dlock-go/dlock/driver"
)

// Backend is the deployment a Client runs on, chosen once by New or
// NewQuorum: one Redis deployment with scripts (single.go; a cluster and
// replica sync are properties of it), the script-free mode (plain.go), or
// a quorum of independent masters (quorum.go). The primitives, the
// acquire path and the watchdog go through it and never ask which one it
// is. Below it, a Driver (driver.go) reaches Redis through a client library.
type Backend interface {
	// Caps says what the deployment can do: every call site asks it, and
	// no backend is asked which one it is.
	Caps() Caps
	// Attempt returns a lock's protocol on this deployment and its
	// acquire attempts, which report outcomes (data: the acquire path
	// makes the holds).
	Attempt(a *AttemptSpec) (HoldOps, AttemptFunc)
	// Grant runs an operation that grants or extends a hold (with replica
	// sync, the acknowledgement is part of it).
	Grant(ctx context.Context, o Op) driver.Reply
	// Run runs any other operation of a hold (a release, a TTL, an inner
	// unlock): every operation goes through the backend.
	Run(ctx context.Context, o Op) driver.Reply
	// Batch runs many operations together (the watchdog's renewals, with
	// grant set; Close's releases) and returns one reply per operation.
	Batch(ctx context.Context, ops []Op, grant bool) []driver.Reply
	// Everywhere runs a script call on every node, for its effect, and
	// returns the first error (a
	// waiter leaving the queues).
	Everywhere(ctx context.Context, c protocol.Call) error
	// Close waits for calls that outlived their operation (a quorum's
	// slow nodes).
	Close()
}

// Request is what a primitive asks of the acquire path, data and the
// calls that make its script calls: its lock, its protocol and how its
// attempts are made. A handle builds it once (an RWMutex's and a
// Semaphore's acquire, whose request depends on the call, build it per
// acquire); an acquire's AttemptSpec, its acquisition.Part and so its hold
// read it by pointer, never a copy of its fields.
type Request struct {
	K    *protocol.Keys
	What string  // the primitive, for errors: "Mutex", "RWMutex", ...
	Side string  // an RWMutex's side, "r" or "w" (a separate re-entry per side); "" for other locks
	Ops  HoldOps // its protocol on a deployment with scripts
	Need int     // permits a semaphore request waits for; 0 for locks
	// Queue: a Lock's waiter registers in Redis (lib_queue.lua), renews
	// its place as it waits, runs Leave when it gives up, and is told on
	// its Client's channel when its turn comes; its attempts carry its
	// member. Without it (an RWMutex's readers), the waiter listens on
	// the lock's channel.
	Queue bool
	// Call is the acquire script call of one attempt; member is the
	// waiter's registration for a Lock's attempts (which take or keep a
	// place in the queue), "" for a TryLock's; placed is true when an
	// earlier attempt of the same acquire made a place (it may have one
	// to give up).
	Call func(token, member string, placed bool, cfg LockConfig) protocol.Call
	// Leave is the call by which member gives up its place in the queue
	// (a quorum sends it to the nodes that kept the place of a round it
	// won).
	Leave func(member string) protocol.Call
}

// AttemptSpec is what a backend is told of an acquire: its request, and
// the acquire's own token, member and options.
type AttemptSpec struct {
	*Request
	Token, Member string
	Cfg           LockConfig
}

// Caps is what a deployment can do, decided once when the Client is made.
type Caps struct {
	// All: every primitive, with re-entry (scripts on one deployment);
	// else only a Mutex, re-entrant if Reentry.
	All, Reentry bool
	// NotThere says why what is not supported here (errNeedsScripts,
	// errNotOnQuorum).
	NotThere func(what string) error
	// HandOff: a release may hand a freed Mutex to its next waiter
	// (internal/acquisition/handoff.go): one deployment with scripts and no replica sync.
	HandOff bool
	// Reserve: a freed Mutex is kept for the waiter told (not on a
	// quorum, whose nodes' queues may disagree on who is first).
	Reserve bool
	// Directed: waiters register in Redis and a release wakes only the
	// one (or those) whose turn it is, on its Client's own channel. Not
	// without scripts, where a release is published on the lock's channel.
	Directed bool
	// OneScript: a set of Mutexes is taken by one script call (LockAll):
	// one node with scripts.
	OneScript bool
	// Bury: an acquire given up on buries its token (bury.lua) so that its
	// late attempts take nothing. Every deployment with scripts.
	Bury bool
}

// Supports returns an error when the deployment cannot run what: a
// primitive ("Semaphore", ...) or "re-entry". Every deployment runs a
// Mutex.
func (c Caps) Supports(what string) error {
	if c.All || what == "Mutex" || what == "re-entry" && c.Reentry {
		return nil
	}
	return c.NotThere(what)
}

// SideBySide runs each operation on its own, all at once: for operations
// that cannot share a pipeline (transactions).
func SideBySide(ctx context.Context, r driver.Driver, ops []Op) []driver.Reply {
	out := make([]driver.Reply, len(ops))
	var wg sync.WaitGroup
	for i, o := range ops {
		wg.Go(func() { out[i] = o.Run(ctx, r) })
	}
	wg.Wait()
	return out
}
