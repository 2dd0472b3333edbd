package dlock

import (
	"context"
	"strconv"
	"strings"

	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/kinds"

	"github.com/dlock-go/dlock/internal/protocol"

	"github.com/dlock-go/dlock/driver"
)

// RWMutex is a read-write lock: many readers at once, or one writer. Each
// read or write acquire returns its own Lease — renewed, lost-signalled
// and fenced like a Mutex's (every reader and writer gets a fence of its
// own, so a writer's fence is above every earlier holder's).
//
// Policy: phase-fair, so that neither side starves. A writer that arrives
// while readers hold stops new readers: they wait, and the writer goes
// when the readers it found are done. When a writer releases, the readers
// waiting at that moment go before the next writer (a read phase), and
// readers arriving after that wait for the next writer. So a reader sees
// at most one write hold begin while it waits, and a writer with k
// writers ahead of it waits at most k + 1 read phases (two, with two
// writers), whatever the numbers of readers and how long anyone holds
// (scripts/lib_rw.lua argues both bounds, and why the rule never lets a
// writer in beside a reader or another writer). Writers among themselves
// are served in arrival order, each keeping a place in a queue that
// expires when the writer stops renewing it (WithQueueTTL), as in
// FairMutex; a waiting reader keeps a place the same way, and an admitted
// reader that never comes holds writers up only until its place expires.
// WithReaderPreference, given to Client.RWMutex, lets its readers in
// while writers wait (those readers do not wait for queued writers, and
// writers may wait for them indefinitely).
//
// Waiters register in Redis and are told on their Client's channel when
// they may go: a writer's release tells the readers it admits, or, when
// none wait, the next writer; the last reader to leave (holding or
// admitted) tells the next writer. No other process is sent anything.
//
// Every reader's hold expires on its own: a crashed reader blocks writers
// for at most its own TTL, whatever the other readers' TTLs.
//
// Re-entry goes through the lease's context for both sides. A writer may
// read inside its write lock (RLock with the write lease's context), as
// often as it likes: each such read is a hold of its own, with a token
// and a fence of its own, so releasing one (or a read given up
// on) never ends another. When the writer unlocks the write lease while
// such reads are still held, the lock becomes a read lock held by them: a
// downgrade, without a moment in which a writer could come in. A reader
// cannot upgrade: Lock with a read lease's context returns an error
// matching ErrInvalidArgument rather than wait for itself forever.
//
// RWMutex is a Locker for its write side; RLocker gives the read side. A
// handle is safe for concurrent use.
type RWMutex struct {
	handle
}

// RWMutex returns the handle of the read-write lock called name. opts set
// the handle's defaults for every acquire (WithTTL, WithLease,
// WithQueueTTL, WithReaderPreference).
func (c *Client) RWMutex(name string, opts ...LockOption) *RWMutex {
	return &RWMutex{handle{c, c.keys(protocol.RWKind, name), opts}}
}

// RLock takes a read hold, waiting while a writer holds the lock or (with
// the default policy) waits for it; a writer's release lets the readers
// then waiting in before the next writer. Woken when its turn comes;
// bounded by the holder's lease. It returns the same errors as
// Mutex.Lock.
func (rw *RWMutex) RLock(ctx context.Context, opts ...LockOption) (*Lease, error) {
	return rw.acquire(ctx, sideRead, true, opts)
}

// TryRLock makes one attempt at a read hold and returns an error matching
// ErrNotObtained if it would have to wait.
func (rw *RWMutex) TryRLock(ctx context.Context, opts ...LockOption) (*Lease, error) {
	return rw.acquire(ctx, sideRead, false, opts)
}

// Lock takes the write hold, waiting until no reader or writer holds the
// lock, the writers that came before have had their turn, and the readers
// that the last writer's release let in have had theirs. It returns the
// same errors as Mutex.Lock.
func (rw *RWMutex) Lock(ctx context.Context, opts ...LockOption) (*Lease, error) {
	return rw.acquire(ctx, sideWrite, true, opts)
}

// TryLock makes one attempt at the write hold, taking no place in the
// writers' queue, and returns an error matching ErrNotObtained if the lock
// is held, writers wait, or readers let in by a writer's release have
// yet to come.
func (rw *RWMutex) TryLock(ctx context.Context, opts ...LockOption) (*Lease, error) {
	return rw.acquire(ctx, sideWrite, false, opts)
}

// RLocker returns the read side of the lock as a Locker: its Lock and
// TryLock are RLock and TryRLock.
func (rw *RWMutex) RLocker() Locker { return readLocker{rw} }

type readLocker struct{ rw *RWMutex }

func (r readLocker) Lock(ctx context.Context, opts ...LockOption) (*Lease, error) {
	return r.rw.RLock(ctx, opts...)
}

func (r readLocker) TryLock(ctx context.Context, opts ...LockOption) (*Lease, error) {
	return r.rw.TryRLock(ctx, opts...)
}

func (r readLocker) Name() string  { return r.rw.Name() }
func (r readLocker) order() string { return r.rw.order() }

func (rw *RWMutex) acquire(ctx context.Context, s side, wait bool, opts []LockOption) (*Lease, error) {
	if rw == nil || rw.c == nil {
		return nil, invalid("nil RWMutex")
	}
	c, k := rw.c, rw.k
	p := kinds.RW{K: k, Side: string(s), W: c.wakeTo(k)}
	r := &request{Request: backend.Request{What: "RWMutex", K: k, Side: string(s), Ops: p, Queue: true, Leave: p.Leave},
		handle: rw.opts, takes: backend.OptQueueTTL | backend.OptReaders}
	if s == sideRead {
		// A read inside the caller's own write hold is a hold of its own
		// (its own token, released or undone on its own), which the
		// script lets in beside that write hold only (rw_read.lua).
		parent := ""
		if writer := leaseFrom(ctx, c, k.Lock, sideWrite); writer != nil {
			parent = writer.of.First().Token()
		}
		r.Call = func(token, member string, _ bool, cfg lockConfig) protocol.Call {
			return protocol.RWReadArgs{Token: token, TTL: cfg.TTL.Milliseconds(), Readers: cfg.Readers, Member: member,
				PlaceTTL: placeTTL(cfg, member), Parent: parent}.Call(k)
		}
	} else {
		r.token = func(ctx context.Context) (string, error) {
			if leaseFrom(ctx, c, k.Lock, sideRead) != nil {
				return "", invalid("RWMutex %q: a read lock cannot be upgraded to a write lock", k.Name)
			}
			return c.newToken(), nil
		}
		r.Call = func(token, member string, _ bool, cfg lockConfig) protocol.Call {
			return p.Write(token, cfg.TTL, 0, member, placeTTL(cfg, member))
		}
	}
	return c.acquire(ctx, r, wait, opts)
}

// side is the side of an RWMutex hold; its value is what the scripts
// take ('r' or 'w').
type side string

const (
	sideRead  side = "r"
	sideWrite side = "w"
)

// rwKind is what Inspect, Locks and ForceUnlock know of an RWMutex: its
// readers' expiries, waiting readers and admitted readers are read beside
// the hash (extra 0, 1, 2).
var rwKind = kindSpec{primitive: "RWMutex", keys: protocol.RWKind, queue: true,
	reads: func(k *protocol.Keys) []driver.Command {
		return []driver.Command{zrange(k.Readers), zrange(k.RQueue), zrange(k.RPhase)}
	},
	fill: rwHolders, waiters: rwWaiters,
	force: func(ctx context.Context, c *Client, r driver.Driver, k *protocol.Keys, rc forceReceipt) driver.Reply {
		w := c.wakeTo(k)
		return protocol.RWForceArgs{Wake: w, ID: rc.id, ReceiptTTL: rc.ttl}.Call(k).Run(ctx, r)
	}}

// rwHolders reads the mode and the holds ('r:<token>', 'w:<token>'),
// each with its own fence; a reader's TTL is its own.
func rwHolders(in *inspection) bool {
	info := in.info
	info.Mode = in.fields[protocol.FieldMode]
	until := in.untilOf(in.extra[0])
	for f, v := range in.fields {
		sd, tok, ok := strings.Cut(f, ":")
		if !ok || (sd != string(sideRead) && sd != string(sideWrite)) {
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		h := Holder{Token: tok, Side: "write", Holds: n, Since: in.msAt(in.fields[protocol.FieldTaken+tok]), TTL: info.TTL}
		h.Fence, _ = strconv.ParseInt(in.fields[protocol.FieldFence+tok], 10, 64)
		if sd == string(sideRead) {
			left, live := until[tok]
			if !live {
				continue // its lease ran out: the scripts drop it (untilOf)
			}
			h.Side, h.TTL = "read", left
		}
		info.Holders = append(info.Holders, h)
	}
	if info.Mode == "read" && len(info.Holders) == 0 {
		info.Mode = "" // its readers' leases all ran out: free (lib_rw.lua's settle)
	}
	return true
}

// rwWaiters lists the admitted readers (a read phase: they go first),
// then the writers' queue in arrival order, then the waiting readers,
// each with its place's expiry.
func rwWaiters(in *inspection) {
	readers := func(r driver.Reply) {
		for _, z := range zsetOf(r) {
			in.info.Waiters = append(in.info.Waiters, Waiter{Token: protocol.TokenOf(z.member), Side: "read", Expires: in.expiry(z.score)})
		}
	}
	readers(in.extra[2])
	in.queued("write", false)
	readers(in.extra[1])
}
