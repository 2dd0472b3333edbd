// Package kinds is what each kind of hold does in Redis: the script
// calls of a Mutex's or FairMutex's hold (Mutex), an Election's leadership
// (Election), an RWMutex's read or write hold (RW) and a Semaphore's
// permits (Semaphore). Each is a backend.HoldOps, built by the root's
// handles and kept by their holds; the methods return the script calls
// (a quorum fans them out), and the exported argument builders are what
// an acquire's attempt, a Campaign and LockAll build on. The root keeps
// the user's API; this package keeps the protocols.
package kinds

import (
	"time"

	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/protocol"
)

var (
	_ backend.Reentrant = Mutex{}
	_ backend.Reentrant = RW{}
	_ backend.HoldOps   = Election{}
	_ backend.HoldOps   = Semaphore{}
)

// Mutex is the Redis side of a Mutex or FairMutex hold.
type Mutex struct {
	K *protocol.Keys
	W *protocol.WakeTo // the keys' own, set by the Client (a pointer: a hold keeps its protocol, boxed)
}

func (p Mutex) Reenter(token string, count int, ttl time.Duration, seq int64) backend.Op {
	a := p.LockArgs(token, ttl, count, "", false, 0, false)
	a.Reentry, a.Seq = true, seq
	return a.Call(p.K)
}

// Lock is lock.lua: count 0 acquires (as member, keeping a place for
// placeTTL ms if it is held; queued: an earlier attempt carried member),
// count >= 2 re-enters.
func (p Mutex) Lock(token string, ttl time.Duration, count int, member string, queued bool, placeTTL int64, fair bool) protocol.Call {
	return p.LockArgs(token, ttl, count, member, queued, placeTTL, fair).Acquire(p.K)
}

// LockArgs are Lock's arguments, for an acquire, a re-entry or a Campaign
// to add to.
func (p Mutex) LockArgs(token string, ttl time.Duration, count int, member string, queued bool, placeTTL int64, fair bool) protocol.LockArgs {
	return protocol.LockArgs{Token: token, TTL: ttl.Milliseconds(), Count: count, Member: member, PlaceTTL: placeTTL,
		Fair: fair, Wake: *p.W, Queued: queued}
}

func (p Mutex) Release(token string, left int, seq int64) backend.Op {
	return p.Unlock(token, left, seq)
}

func (p Mutex) Free(token string, fence int64, ttl time.Duration) backend.Op {
	return p.FreeArgs(token, fence, ttl).FreeCall(p.K)
}

// FreeArgs are the final release's, with its receipt (unlock.lua's
// ARGV[8] and ARGV[9]).
func (p Mutex) FreeArgs(token string, fence int64, ttl time.Duration) protocol.UnlockArgs {
	a := p.UnlockArgs(token, 0, 0)
	a.Free, a.Fence, a.ReceiptTTL = true, fence, ttl.Milliseconds()
	return a
}

// Unlock is the script call behind Release.
func (p Mutex) Unlock(token string, left int, seq int64) protocol.Call {
	return p.UnlockArgs(token, left, seq).Call(p.K)
}

// UnlockArgs are Unlock's arguments, for an Election to add to.
func (p Mutex) UnlockArgs(token string, left int, seq int64) protocol.UnlockArgs {
	return protocol.UnlockArgs{Token: token, Left: left, Wake: *p.W, Reserve: p.W.Reserve, Seq: seq}
}

// Leave is what a waiter that gives up runs.
func (p Mutex) Leave(member string) protocol.Call {
	return protocol.LeaveArgs{Member: member, Wake: *p.W, Reserve: p.W.Reserve}.Call(p.K)
}

func (p Mutex) Renew(token string, ttl time.Duration, exact bool, seq int64) backend.Op {
	return protocol.RenewArgs{Token: token, TTL: ttl.Milliseconds(), Exact: exact, Seq: seq}.Call(p.K)
}

func (p Mutex) TTL(token string) backend.Op { return protocol.TTLArgs{Token: token}.Call(p.K) }

func (Mutex) Ordered() bool { return true }

// Election is the Redis side of a leadership: a FairMutex hold whose
// release also tells the observers. It is not re-entrant: a Campaign on a
// Client that leads proclaims on its leadership (the root's Campaign);
// every other Campaign is a candidate of its own.
type Election struct{ M Mutex }

func (p Election) Release(token string, left int, seq int64) backend.Op {
	a := p.M.UnlockArgs(token, left, seq)
	a.Observers = p.M.K.Channel
	return a.Call(p.M.K)
}

func (p Election) Free(token string, fence int64, ttl time.Duration) backend.Op {
	a := p.M.FreeArgs(token, fence, ttl)
	a.Observers = p.M.K.Channel
	return a.FreeCall(p.M.K)
}

func (p Election) Renew(token string, ttl time.Duration, exact bool, seq int64) backend.Op {
	return p.M.Renew(token, ttl, exact, seq)
}

func (p Election) TTL(token string) backend.Op { return p.M.TTL(token) }

func (Election) Ordered() bool { return true }

// RW is the Redis side of a read or write hold of an RWMutex.
type RW struct {
	K    *protocol.Keys
	Side string // "r" or "w", as the scripts take it
	W    protocol.WakeTo
}

func (p RW) Reenter(token string, count int, ttl time.Duration, seq int64) backend.Op {
	if p.Side == "r" {
		return protocol.RWReadArgs{Token: token, TTL: ttl.Milliseconds(), Count: count, Readers: true, Reentry: true, Seq: seq}.Call(p.K)
	}
	a := p.WriteArgs(token, ttl, count, "", 0)
	a.Reentry, a.Seq = true, seq
	return a.Call(p.K)
}

// Write is rw_write.lua: count 0 acquires (as member, keeping a place for
// placeTTL ms if it must wait), count >= 2 re-enters.
func (p RW) Write(token string, ttl time.Duration, count int, member string, placeTTL int64) protocol.Call {
	return p.WriteArgs(token, ttl, count, member, placeTTL).Call(p.K)
}

// WriteArgs are Write's arguments.
func (p RW) WriteArgs(token string, ttl time.Duration, count int, member string, placeTTL int64) protocol.RWWriteArgs {
	return protocol.RWWriteArgs{Token: token, TTL: ttl.Milliseconds(), Count: count, Member: member, PlaceTTL: placeTTL, Wake: p.W}
}

func (p RW) Release(token string, left int, seq int64) backend.Op {
	return p.unlockArgs(token, left, seq).Call(p.K)
}

func (p RW) unlockArgs(token string, left int, seq int64) protocol.RWUnlockArgs {
	return protocol.RWUnlockArgs{Token: token, Side: p.Side, Left: left, Wake: p.W, Seq: seq}
}

// Leave is what a reader or writer that gives up its wait runs.
func (p RW) Leave(member string) protocol.Call {
	return protocol.RWLeaveArgs{Member: member, Side: p.Side, Wake: p.W}.Call(p.K)
}

func (p RW) Renew(token string, ttl time.Duration, exact bool, seq int64) backend.Op {
	return protocol.RWRenewArgs{Token: token, Side: p.Side, TTL: ttl.Milliseconds(), Exact: exact, Seq: seq}.Call(p.K)
}

func (p RW) TTL(token string) backend.Op {
	return protocol.RWTTLArgs{Token: token, Side: p.Side}.Call(p.K)
}

func (RW) Ordered() bool { return true }

// Free is the final release with its receipt (rw_unlock.lua, ARGV[7]).
func (p RW) Free(token string, _ int64, ttl time.Duration) backend.Op {
	a := p.unlockArgs(token, 0, 0)
	a.Receipt, a.ReceiptTTL = true, max(ttl, time.Millisecond).Milliseconds()
	return a.Call(p.K)
}

// Semaphore is the Redis side of a semaphore hold.
type Semaphore struct {
	K *protocol.Keys
	W protocol.WakeTo
}

func (p Semaphore) Release(token string, left int, _ int64) backend.Op {
	return protocol.SemReleaseArgs{Token: token, Left: left, Wake: p.W}.Call(p.K)
}

// Leave is what a waiter that gives up runs.
func (p Semaphore) Leave(member string) protocol.Call {
	return protocol.SemLeaveArgs{Member: member, Wake: p.W}.Call(p.K)
}

func (p Semaphore) Renew(token string, ttl time.Duration, exact bool, seq int64) backend.Op {
	return protocol.SemRenewArgs{Token: token, TTL: ttl.Milliseconds(), Exact: exact, Seq: seq}.Call(p.K)
}

func (p Semaphore) TTL(token string) backend.Op { return protocol.SemTTLArgs{Token: token}.Call(p.K) }

func (Semaphore) Ordered() bool { return true }

// Free is the final release with its receipt (sem_release.lua, ARGV[5]).
func (p Semaphore) Free(token string, _ int64, ttl time.Duration) backend.Op {
	return protocol.SemReleaseArgs{Token: token, Wake: p.W, Receipt: true, ReceiptTTL: max(ttl, time.Millisecond).Milliseconds()}.Call(p.K)
}
