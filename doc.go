// Package dlock provides distributed locks on Redis: every hold carries a
// fencing token and a lease that tells its holder the moment it may have
// been lost; leases are renewed by a batched watchdog; waits are woken by
// the release instead of polling.
//
// The family:
//
//   - Mutex: reentrant, one owner at a time; under contention it goes
//     round in arrival order (Client.Mutex).
//   - FairMutex: reentrant, granted in arrival order across processes; a
//     dead waiter is skipped within a bounded time (Client.FairMutex).
//   - RWMutex: shared readers or one writer, phase-fair (neither side
//     starves), each reader expiring on its own, downgrade from write to
//     read (Client.RWMutex).
//   - Semaphore: leased, fenced permits that come back when their holder
//     stops renewing them; waiters served in order (Client.Semaphore).
//   - Latch: a count-down latch whose waiters are woken at zero
//     (Client.Latch).
//   - LockAll: all or nothing over any set of the locks, in a fixed order,
//     with one lease for the set.
//   - Election: leader election on a fair lock — Campaign, Proclaim,
//     Resign, Leader, Observe — whose terms are fencing tokens and whose
//     observers are told when nobody leads (Client.Election).
//
// Every acquire returns a *Lease; Mutex, FairMutex and both sides of an
// RWMutex are Lockers.
//
// # Deployments
//
//   - One Redis, or a primary managed by Sentinel (go-redis's failover
//     client): New. WithReplicaSync waits for replicas after each grant.
//   - Redis Cluster: New with a *redis.ClusterClient. A lock's keys share a
//     hash tag; wake-ups use sharded pub/sub.
//   - Independent masters: NewQuorum, the RedLock algorithm (Mutex only).
//   - Proxies that forbid Lua: New with WithoutScripts (plain Mutex only).
//
// # Redis clients
//
// New takes a go-redis v9 client. The packages rueidisdlock and
// valkeydlock make the same Client on a rueidis or a valkey-go client
// (rueidisdlock.New(client, opts...)), single node, Sentinel or Cluster;
// a program that imports only dlock does not compile them. Underneath,
// each is a Driver (NewWithDriver), the seam where dlock meets a client
// library: a Client speaks to Redis only through one.
//
// # Quick start
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	c, err := dlock.New(rdb, dlock.WithPrefix("myapp"))
//	if err != nil { ... }
//	defer c.Close()
//
//	lease, err := c.Mutex("orders/42").Lock(ctx) // waits; ctx bounds the wait
//	if err != nil { ... }
//	defer lease.Unlock(context.Background())
//	work(lease.Context(ctx), lease.Fence())   // cancelled if the lease is lost
//
// # Guarantees
//
// On one Redis server (or a primary with no failover):
//
//   - At most one owner holds a lock at a time, as long as the server
//     keeps its data. Acquire, re-entry, release and renewal are each one
//     Lua script; time is the server's (PEXPIRE, PTTL), never a client
//     clock.
//   - Owners are 128-bit random tokens: nobody releases or extends a lock
//     it does not hold.
//   - Fencing tokens (Lease.Fence) increase strictly from one owner of a
//     lock name to the next, forever. They come from a counter that never
//     expires and that the locks share (one per prefix; on a cluster one
//     per hash slot), so the keys left behind are bounded whatever the
//     number of names: a fence is above every earlier one of its lock,
//     not necessarily by one. They are exact up to 2^63−1 (past 2^53 the
//     scripts return them as strings, not as Lua's rounded numbers).
//   - Each kind of lock has its own keys: Mutex (and FairMutex, one lock
//     with it), RWMutex, Semaphore and Latch called by the same name are
//     different locks and never read each other's state.
//   - A lease ends, closing Done and cancelling its Context, when a renewal
//     finds the lock gone or someone else's, or when no renewal has been
//     confirmed by its local deadline: the start of the last confirmed
//     request + TTL − (TTL/100 + 2 ms), on the monotonic clock. Because the
//     server's expiry counts from when it received that request, the
//     holder is told before the server can give the lock to another owner,
//     provided the two clocks run at rates within 1% of each other.
//   - Acquires are idempotent: go-redis retries a call whose reply was lost,
//     and a retried acquire that had already succeeded reports success.
//     An acquire that fails or is cancelled with its outcome unknown
//     releases what it may have taken: before it returns when Redis
//     answers within 20 ms, else in the background — and never before the
//     acquire itself can no longer run on the server.
//   - A hand-off (a release that gives the lock to the next waiter with the
//     message that wakes it) is honoured only while it is provably still
//     the waiter's: a waiting process paused past its place and its TTL,
//     with the message unread, is not granted the stale hand-off when it
//     resumes (see "Hand-off" in internal/acquisition/doc.go for the argument).
//   - A ctx bounds every call that takes one, whatever the server does
//     (slow, paused, stopped, unreachable), on any go-redis client — no
//     ContextTimeoutEnabled needed: the Client's commands go on
//     connections of its own (see New; a cluster's, one set a master),
//     where a caller waits for its reply or its ctx; under
//     WithoutOwnConnections (or a client with an OnConnect hook), each
//     round trip runs on a goroutine of its own while the caller waits. A grant whose reply
//     comes after its caller gave up is released, not reported.
//   - A watchdog renewal only ever lengthens a lease on the server; Extend
//     sets it. So a renewal still in flight when Extend ran never shortens
//     the lease behind its holder's back.
//
// Liveness: a lock is not held, and a waiter does not sleep, longer than
// the holder's lease:
//
//   - Unlock ends the lease whatever it returns, and stops its renewal; a
//     release that failed (ctx ended, Redis unreachable) is retried in the
//     background until Redis answers or the TTL has passed.
//   - Client.Close ends every lease it still has (holders are told first)
//     and releases them, bounded to about two seconds.
//   - A waiter registers in Redis and a release wakes only the process
//     whose waiter is next, on that Client's own channel: the server's
//     work per release does not grow with the number of processes waiting.
//     A Mutex or FairMutex is handed over by the release itself: the
//     woken Lock returns without a round trip of its own.
//     A waiter that is killed is skipped when its place expires
//     (WithQueueTTL). A waiter re-checks the lock if its subscription was
//     not confirmed before it registered, and again after every
//     resubscription (a pub/sub reconnect), so a release published while
//     it was not listening is not missed; a lost message still costs at
//     most the holder's remaining lease, or QueueTTL/3.
//
// # Failure model
//
// What a lock on Redis does not protect against, said plainly:
//
//   - A holder that stops (GC pause, SIGSTOP, a swapped-out VM) longer than
//     its lease, and then acts without looking at Err or Done. Nothing
//     client-side can stop a paused process from resuming its work; the
//     fencing token can: the protected resource rejects a fence lower than
//     one it has seen. Use it for anything that must be exact.
//   - Redis replication is asynchronous: when a primary fails over, a lock
//     it granted may be missing on the promoted replica, and a second owner
//     may acquire it — with the same fence, since the counter is replicated
//     the same way. WithReplicaSync narrows this (an acquire the replicas
//     did not acknowledge fails) but WAIT is not consensus. A restart
//     without persistence drops locks and resets the fencing counter; with
//     appendfsync always both survive.
//   - RedLock (NewQuorum) assumes bounded clock drift and pauses shorter
//     than a lock's validity, and a node that restarts without persistence
//     must stay out for the longest TTL; otherwise a second owner can win.
//   - Renewal needs Redis: a holder cut off from it loses its lease at its
//     local deadline, even if the server kept the lock.
//   - A call given up on when its ctx ended may still run on the server.
//     A late grant is released once its reply has come; if the connection
//     gives up on it first (its ReadTimeout) and the server runs it later
//     still, that lock is held by nobody until its TTL.
//   - A lock deleted behind its holder's back (an administrator, a
//     FLUSHALL) is noticed at the holder's next renewal, up to TTL/3 later;
//     meanwhile another owner may take it. Fencing covers that window too.
//   - A server that evicts keys (any maxmemory-policy but noeviction,
//     volatile-* included, since lock keys carry TTLs) can drop a held lock
//     and its fence counter: a second owner, the same fence twice. A
//     Client's first Lock or TryLock reads the policy (INFO memory, on every
//     node, every master of a cluster) and fails with ErrEvictionPolicy
//     unless WithEvictionRisk accepts the risk.
//   - An ACL user without pub/sub channels (Redis 7 grants none by
//     default) cannot publish a release or subscribe to one. Locks stay
//     correct — the scripts publish last, through pcall, so a refused
//     wake-up fails nothing — but waits are no longer woken: the Client
//     logs a warning once, Client.Health returns an error matching
//     ErrPubSubRefused, and waits poll (16 ms doubling to 256 ms). Grant
//     the channels &<prefix>:*. "dlock check" lists what a server and user
//     lack.
//
// # Ownership and re-entry
//
// A Lease is the owner, not a goroutine. Lease.Context returns a context
// carrying the lease; a Lock of the same lock given that context (or a
// context derived from it) re-enters: the hold count goes up and the same
// fence comes back. Any other context waits like any other owner.
//
// # Errors
//
// Errors match the sentinels ErrNotObtained, ErrNotHeld, ErrLeaseLost,
// ErrUnlocked, ErrClosed, ErrReplicaSync, ErrEvictionPolicy and
// ErrInvalidArgument under errors.Is (Client.Health's, ErrPubSubRefused); a wait
// that its context ended also matches ctx.Err(). Redis errors are
// returned wrapped.
package dlock
