package dlock

import (
	"github.com/dlock-go/dlock/internal/errs"
)

// Sentinel errors. Check them with errors.Is: the errors that dlock returns
// wrap them with detail (the lock's name, the Redis error behind them).
var (
	// ErrNotObtained means the lock is held by another owner: a TryLock
	// found it taken, or a Lock's wait ended (its context was cancelled or
	// timed out) before the lock came free. An error from a wait that ended
	// with its context also matches ctx.Err() under errors.Is.
	ErrNotObtained = errs.NotObtained

	// ErrNotHeld means the caller does not hold the lock it tried to
	// release, extend or inspect: the lease was already unlocked, or lost.
	ErrNotHeld = errs.NotHeld

	// ErrLeaseLost is a lease's Err once it may have ended without an
	// Unlock: a renewal found the key gone or owned by another, no renewal
	// was confirmed before the lease's local deadline, or a fixed lease ran
	// out. Another owner may hold the lock from that moment on.
	ErrLeaseLost = errs.LeaseLost

	// ErrUnlocked is a lease's Err after its Unlock succeeded.
	ErrUnlocked = errs.Unlocked

	// ErrClosed is returned by calls on a closed Client, and is the Err of
	// leases that were still held when their Client was closed.
	ErrClosed = errs.Closed

	// ErrReplicaSync means fewer replicas than WithReplicaSync asks for
	// acknowledged a grant in time. An acquire that fails with it has been
	// released.
	ErrReplicaSync = errs.ReplicaSync

	// ErrEvictionPolicy is returned by a Client's first Lock or TryLock
	// when a server's maxmemory-policy may evict keys (anything but
	// noeviction): an evicted lock lets a second owner in, an evicted fence
	// counter issues the same fences again. Set maxmemory-policy
	// noeviction, or accept the risk with WithEvictionRisk.
	ErrEvictionPolicy = errs.EvictionPolicy

	// ErrUnsupportedServer is returned by a Client's first Lock or TryLock
	// (where ErrEvictionPolicy is) when a server is older than the oldest
	// dlock supports, Redis 6.0 (every Valkey is supported), or, on a
	// cluster with sharded pub/sub (the default there), older than Redis
	// 7.0. The error names the server's version and the oldest supported;
	// nothing has been written. docs/deployments.md, "Supported servers".
	ErrUnsupportedServer = errs.UnsupportedServer

	// ErrPubSubRefused is matched by Client.Health's error once the server
	// refused the Client's PUBLISH or SUBSCRIBE (an ACL user without the
	// channels &<prefix>:*): releases wake nobody, and waits poll.
	ErrPubSubRefused = errs.PubSubRefused

	// ErrInvalidArgument is wrapped by every error about bad input: an
	// empty lock name, a TTL out of range, a nil context or client.
	ErrInvalidArgument = errs.InvalidArgument

	// ErrNoLeader is returned by Election.Leader when nobody leads the
	// election.
	ErrNoLeader = errs.NoLeader
)

// invalid returns an error wrapping ErrInvalidArgument with a description.
func invalid(format string, args ...any) error { return errs.Invalid(format, args...) }

// waitEnded is the error of a wait cut short by its context: it matches
// ErrNotObtained and the context's error.
func waitEnded(name string, ctxErr error) error { return errs.WaitEnded(name, ctxErr) }

// redisErr wraps an error from Redis with what dlock was doing.
func redisErr(op, name string, err error) error { return errs.Redis(op, name, err) }
