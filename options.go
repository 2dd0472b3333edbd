package dlock

import (
	"log/slog"
	"time"

	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/hold"

	"github.com/dlock-go/dlock/internal/telemetry"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// DefaultTTL is the lease of a lock taken without WithTTL or WithLease: it
// lives 30 s and is renewed every 10 s until it is unlocked.
const DefaultTTL = 30 * time.Second

// DefaultPrefix starts every key dlock writes, unless WithPrefix says
// otherwise.
const DefaultPrefix = "dlock"

// minTTL is the shortest lease Redis can express (PEXPIRE counts in ms).
const minTTL = hold.MinTTL

// Option configures a Client.
type Option func(*clientConfig)

type clientConfig struct {
	prefix    string
	quorumSet bool // a quorum-only option was given
	sharded   bool
	shardOK   bool // sharded was set explicitly

	slotFences, slotFencesSet bool // WithSlotFences
	sync                      backend.ReplicaSync
	noScripts                 bool
	drift                     backend.Drift
	quorum                    quorumConfig
	logger                    *slog.Logger
	meters                    metric.MeterProvider
	tracers                   trace.TracerProvider
	names                     bool
	label                     string
	noOwner                   bool
	throughClient             bool // WithoutOwnConnections

	evictionRisk bool // WithEvictionRisk (internal/deploy)

	deadlockDelay time.Duration // WithDeadlockDelay
	deadlockSet   bool          // WithDeadlockDelay was given
	noDeadlocks   bool          // WithoutDeadlockDetection
}

// WithPrefix sets the prefix of every key and channel the Client uses:
// "<prefix>:{<name>}" for a lock named name. Default: "dlock". The prefix
// must be non-empty and must not contain '{' or '}'. Deployments that
// share a server need prefixes of their own, and one must not be another's
// followed by ":fence" ("app" and "app:fence"): with slot fences the
// counters of "app" are app:fence:{<tag>}, <tag> a string of one to three
// characters 0-9a-z, the names of the locks of "app:fence" so called.
// (The fold of fence counters, internal/deploy/fold.go, takes only its own keys: their
// exact names, holding integers.)
func WithPrefix(prefix string) Option {
	return func(c *clientConfig) { c.prefix = prefix }
}

// WithShardedPubSub chooses sharded pub/sub (SPUBLISH, SSUBSCRIBE, Redis 7+)
// for wake-ups. Default: on for a *redis.ClusterClient, off otherwise; set
// it when a wrapper hides a cluster client.
func WithShardedPubSub(on bool) Option {
	return func(c *clientConfig) { c.sharded, c.shardOK = on, true }
}

// WithSlotFences chooses fence counters per cluster hash slot, as on a
// Redis Cluster, rather than one for every lock (internal/protocol/keys.go, "Fence
// counters"). Default: on for a cluster client, off otherwise; set it on
// for a proxy that shards by slot without being a cluster to its clients
// (a script there must touch the keys of one slot: without it every
// acquire fails with CROSSSLOT). Either way no key is left per lock name.
// Switching it for a deployment that has issued fences keeps fences
// growing only when no Client of the old layout runs after the first of
// the new one has started: a Client folds the other layout's counters
// into its own once, before its first fence (internal/deploy/fold.go), and a Client of
// the old layout still running takes fences from a counter nobody reads
// again, which repeat. Stop them all, then start the new ones.
func WithSlotFences(on bool) Option {
	return func(c *clientConfig) { c.slotFences, c.slotFencesSet = on, true }
}

// LockOption configures one lock: pass it to Client.Mutex to set the
// handle's default, or to Lock or TryLock for one call.
type LockOption func(*lockConfig)

// lockConfig is what the lock options set (backend.LockConfig).
type lockConfig = backend.LockConfig

var defaultLock = lockConfig{TTL: DefaultTTL, Renew: true, QueueTTL: DefaultQueueTTL}

// DefaultQueueTTL is how long a waiter's place in a queue (FairMutex, a
// writer waiting on an RWMutex) outlives the waiter's last sign of life.
const DefaultQueueTTL = 3 * time.Second

// WithQueueTTL sets how long a waiter's place in a lock's queue in Redis —
// that of a Mutex, FairMutex, Semaphore, or an RWMutex's writers — lives
// without a sign of life. A waiter renews its place every d/3 while it
// waits, so a waiter that was killed is skipped at most d after its last
// renewal (a lock kept for it is kept that long at most). Default:
// DefaultQueueTTL (3 s). Shorter skips dead waiters sooner and costs more
// renewals. d must be at least 3 ms. An RWMutex's waiting readers keep a
// place too: one let in by a writer's release that never comes holds the
// next writer up at most d.
func WithQueueTTL(d time.Duration) LockOption {
	return func(c *lockConfig) { c.QueueTTL, c.Set = d, c.Set|backend.OptQueueTTL }
}

// WithTTL gives the lease a time to live of d, renewed by the Client's
// watchdog every d/3 until Unlock. Default: DefaultTTL (30 s). A shorter
// TTL frees a crashed holder's lock sooner and costs more renewals. d must
// be at least 1 ms.
func WithTTL(d time.Duration) LockOption {
	return func(c *lockConfig) { c.TTL, c.Renew = d, true }
}

// WithLease gives the lease a fixed time to live of d with no renewal: the
// lock frees itself d after it was taken (or last extended), and the
// lease's Done closes just before that, with Err ErrLeaseLost. d must be at
// least 1 ms.
func WithLease(d time.Duration) LockOption {
	return func(c *lockConfig) { c.TTL, c.Renew = d, false }
}

// WithMaxHold limits how long a hold can last: the watchdog renews the
// lease only up to d after the lock was taken, and Extend is cut to that
// moment too, so a holder that is stuck but alive (its process renews, its
// work never ends) cannot keep the lock for ever. At d the lease ends —
// Done closes, Err matches ErrLeaseLost and says that its max hold ran
// out — and the lock frees itself in Redis then (the holder's local
// deadline keeps its usual drift margin before that; the server's end
// may come later by the delay of the last command that set the lease,
// on its way to the server). A lease shorter than d is not lengthened; a
// TTL above d is cut to d. A re-entry through the lease's context shares
// the hold, and its limit: it renews the lease no further than d either.
// An Extend or re-entry that fails (its ctx ended, Redis did not answer)
// changes nothing of the limit: the watchdog goes on renewing up to d.
// For a lock handed over by a release to a waiting Lock, d counts from
// when the hand-off reached the waiter. After d, Extend and re-entry fail
// with ErrNotHeld. d must be at least 1 ms. Default: none.
func WithMaxHold(d time.Duration) LockOption {
	return func(c *lockConfig) { c.MaxHold = d }
}

// WithReaderPreference lets an RWMutex's readers in while writers wait.
// Default: off — the lock is phase-fair: once a writer waits, new readers
// queue behind it, and a writer's release lets the readers then waiting
// in before the next writer, so neither side starves. With it, readers
// never wait for waiting writers, and writers may starve. Pass it to
// Client.RWMutex so that every reader of the handle uses it. Other locks
// refuse it (ErrInvalidArgument).
func WithReaderPreference() LockOption {
	return func(c *lockConfig) { c.Readers, c.Set = true, c.Set|backend.OptReaders }
}

// MaxLabel is the longest label WithLabel takes, in bytes.
const MaxLabel = 256

// WithLabel records label with the hold the acquire takes: any bytes, at
// most MaxLabel (256) of them; a longer one fails the acquire with an
// error matching ErrInvalidArgument before anything is sent. Inspect
// shows it (Holder.Label), and so does the *BusyError of another
// acquire that this hold refuses. The label is part of the hold in the
// lock's own key (docs/how-it-works.md): it lives, is renewed and is
// deleted with the hold, whatever ends it (Unlock, expiry, a
// ForceUnlock). A Mutex's, FairMutex's or Election's hold is written with
// its label by the attempt that takes it, at no cost in round trips. An
// RWMutex's, a Semaphore's and a LockAll's holds, and a lock handed to a
// waiter by a release (which does not know the label), are labelled by
// one more call after the grant, by the acquire once the grant has
// reached it: a round trip more, between the grant and which the hold
// shows no label, and if that call fails (its ctx ended, Redis did not
// answer) the hold keeps none — the lease is returned all the same. A
// re-entry keeps the label of the hold it enters (its own is not
// recorded). Clients WithoutScripts and quorum Clients (NewQuorum) keep
// no label; Default: none.
func WithLabel(label string) LockOption {
	return func(c *lockConfig) { c.Label = label }
}

// withOpts is c with the options of each list applied, in order: a
// handle's defaults, then a call's. (One list or two, c is one value:
// an option is an unknown func, so the &c it is given makes c escape to
// the heap, once a call with options: applyOpts.)
func withOpts(c lockConfig, lists ...[]LockOption) lockConfig {
	for _, opts := range lists {
		if len(opts) > 0 {
			c = applyOpts(c, lists)
			break
		}
	}
	if c.MaxHold > 0 && c.TTL > c.MaxHold {
		c.TTL = c.MaxHold // a lease does not outlive its max hold
	}
	return c
}

// applyOpts is withOpts's options run on c: apart, so that only a call
// with options pays for the copy of c they are given, which escapes.
func applyOpts(c lockConfig, lists [][]LockOption) lockConfig {
	for _, opts := range lists {
		for _, o := range opts {
			if o != nil {
				o(&c)
			}
		}
	}
	return c
}

// validLock says whether c can be used.
func validLock(c lockConfig) error {
	if c.TTL < minTTL {
		return invalid("lease TTL %v is below 1ms", c.TTL)
	}
	if c.MaxHold != 0 && c.MaxHold < minTTL {
		return invalid("max hold %v is below 1ms", c.MaxHold)
	}
	if c.QueueTTL < 3*minTTL {
		return invalid("queue TTL %v is below 3ms", c.QueueTTL)
	}
	if len(c.Label) > MaxLabel {
		return invalid("label of %d bytes: at most %d", len(c.Label), MaxLabel)
	}
	return nil
}

// defaultDrift is 1% of the TTL plus 2 ms, as RedLock's analysis uses.
var defaultDrift = backend.Drift{Factor: 0.01, Extra: 2 * time.Millisecond}

// WithClockDrift sets the margin every lease keeps between its local
// deadline and the server's expiry: factor × TTL + extra. Default: 0.01 ×
// TTL + 2 ms. Raise it where clocks may run at rates further apart, or
// where a process may stall between reading the clock and acting. For a
// quorum (NewQuorum) the same margin is taken off a lock's validity.
func WithClockDrift(factor float64, extra time.Duration) Option {
	return func(c *clientConfig) { c.drift = backend.Drift{Factor: factor, Extra: extra} }
}

// WithoutScripts makes the Client use no Lua, for proxies and managed
// services that forbid EVAL. Only Mutex works then, as a plain lock that
// is not re-entrant:
//
//   - acquire is one MULTI/EXEC transaction: INCR of the fence counter,
//     SET key token NX PX ttl, and a read of the key (one round trip; the
//     fence is the INCR's, taken atomically with the grant);
//   - release and renewal compare the owner and act in one step: DELEX /
//     SET IFEQ where the server has them (Redis 8.4), DELIFEQ / SET IFEQ
//     (Valkey 9), and otherwise WATCH, GET, MULTI, DEL or PEXPIRE, EXEC;
//   - renewals are sent side by side, one transaction each, not in one
//     pipeline;
//   - the Client writes no owner record: Inspect and Locks show its
//     holders without their Owner.
//
// Leases, loss signalling, fencing, waits woken by pub/sub and ownership
// checks are as with scripts. The lock key is a string, not a hash: every
// client of one lock must agree on the mode. FairMutex, RWMutex,
// Semaphore, Latch and re-entry need scripts: their calls return an error
// matching errors.ErrUnsupported. WithReplicaSync cannot be combined with
// it (New returns an error).
func WithoutScripts() Option {
	return func(c *clientConfig) { c.noScripts = true }
}

// WithoutOwnConnections makes New and NewQuorum send every command
// through the go-redis client they are given, rather than on connections
// of the Client's own made from its options (see New): the client's hooks
// (tracing, metrics) then see dlock's commands, and its pool, timeouts
// and retries apply. The cost: a goroutine per call (so that the call
// still returns when its ctx ends), no batching of concurrent calls but
// dlock's own, and a call go-redis may send twice (after its
// ReadTimeout), which a lock then answers by burying its token at its
// release (an extra call). NewWithDriver ignores it.
func WithoutOwnConnections() Option {
	return func(c *clientConfig) { c.throughClient = true }
}

// WithNodeTimeout bounds each node's part of a quorum call (NewQuorum):
// a node that has not answered by then counts as failed for that call.
// Default: DefaultNodeTimeout (100 ms). Keep it far below the TTL: time
// spent acquiring is taken off the lock's validity. The Client's own
// connections to a node honour it (see New); under WithoutOwnConnections
// go-redis honours it on the socket only with ContextTimeoutEnabled in the
// node's options, and without that a slow node still delays the call (the
// validity check stays right).
func WithNodeTimeout(d time.Duration) Option {
	return func(c *clientConfig) { c.quorum.timeout, c.quorumSet = d, true }
}

// WithRetryJitter sets the most random delay a quorum waiter adds before
// trying again after a round in which nobody won a majority, so that
// competing clients do not split the votes forever. Default: 50 ms.
func WithRetryJitter(d time.Duration) Option {
	return func(c *clientConfig) { c.quorum.jitter, c.quorumSet = d, true }
}

// WithReplicaSync makes every grant wait until replicas replicas have
// acknowledged it, for up to timeout: after an acquire, a re-entry, an
// Extend and each renewal, the Client sends WAIT replicas timeout on the
// connection that carried the write. An acquire that fewer replicas
// acknowledge is released and fails with an error matching ErrReplicaSync;
// a renewal that fewer acknowledge confirms nothing (the lease is lost at
// its deadline if that goes on).
//
// It narrows the failover hole of asynchronous replication: a lock that a
// replica has acknowledged survives that replica's promotion. It does not
// close it: WAIT does not make Redis consistent (a replica that
// acknowledged may not be the one promoted, and data may still be lost on
// a failover), and every grant costs up to a replication round trip more.
//
// Default: off. replicas must be at least 1 and timeout at least 1 ms. On
// a cluster, the write and its WAIT go to the master of the lock's slot,
// and renewals are sent one lock at a time rather than in a pipeline.
func WithReplicaSync(replicas int, timeout time.Duration) Option {
	return func(c *clientConfig) { c.sync = backend.ReplicaSync{Replicas: replicas, Timeout: timeout} }
}

// WithoutOwnerInfo stops a Client from recording who it is: inspectors then
// show its holds by token only.
func WithoutOwnerInfo() Option {
	return func(c *clientConfig) { c.noOwner = true }
}

// WithOwnerLabel sets the free label a Client records about itself for
// inspectors, next to its host name, pid, program and start time (on by
// default; never put a secret in it).
func WithOwnerLabel(label string) Option {
	return func(c *clientConfig) { c.label = label }
}

// WithLogger logs what a Client's owner should hear of: leases lost
// (Warn), renewals and background releases that failed (Warn), acquires
// whose outcome was unknown and were undone (Info), quorum nodes that
// failed (Warn). Nothing on the happy path is logged above Debug. Default:
// no logging.
func WithLogger(l *slog.Logger) Option {
	return func(c *clientConfig) { c.logger = l }
}

// WithMeterProvider records the Client's metrics (see the list in the
// package documentation of telemetry) with mp. Default: the global
// provider, otel.GetMeterProvider(), a no-op until the application sets
// one.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *clientConfig) { c.meters = mp }
}

// WithTracerProvider makes the Client's spans with tp. Default: the global
// provider, otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *clientConfig) { c.tracers = tp }
}

// WithNameAttribute adds the lock's name (dlock.lock.name) to metrics and
// spans. Off by default: every distinct name is a new time series.
func WithNameAttribute() Option {
	return func(c *clientConfig) { c.names = true }
}

// newTelemetry makes a Client's instruments (internal/telemetry) from its
// options; an acquire's outcome is told by dlock's errors.
func newTelemetry(cfg clientConfig) *telemetry.Telemetry {
	return telemetry.New(telemetry.Config{Logger: cfg.logger, Meters: cfg.meters, Tracers: cfg.tracers, Names: cfg.names,
		Closed: ErrClosed, Invalid: ErrInvalidArgument, Busy: ErrNotObtained})
}

// WithEvictionRisk lets the Client run on a server whose maxmemory-policy
// may evict keys (anything but noeviction). Without it, the first Lock or
// TryLock of such a Client fails with an error matching ErrEvictionPolicy.
// With it, the Client works there and logs one warning: an evicted lock
// key lets a second owner in while the first still holds a live lease,
// and an evicted fence counter issues fences that were issued before.
// Default: off.
func WithEvictionRisk() Option {
	return func(c *clientConfig) { c.evictionRisk = true }
}

// WithDeadlockDelay sets how long a Lock that waits while it holds leases
// (passed in its ctx with Lease.Context) waits before it looks for a
// deadlock (as PostgreSQL's deadlock_timeout); it looks again after pauses
// that double from it up to eight times it while it waits. A cycle that forms and dissolves within it is never
// reported. Default: one second; it must be positive and at most an hour.
// docs/guarantees.md, "Deadlocks".
func WithDeadlockDelay(d time.Duration) Option {
	return func(c *clientConfig) { c.deadlockDelay, c.deadlockSet = d, true }
}

// WithoutDeadlockDetection turns deadlock detection off for the Client:
// its waits record nothing and look for no cycle, so a cycle through them
// is seen by nobody, and none of its acquires returns ErrDeadlock.
func WithoutDeadlockDetection() Option {
	return func(c *clientConfig) { c.noDeadlocks = true }
}

// defaultDeadlockDelay is WithDeadlockDelay's default.
const defaultDeadlockDelay = time.Second
