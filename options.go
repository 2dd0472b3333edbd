package dlock

import (
	"time"
)

// DefaultTTL is the lease of a lock taken without WithTTL or WithLease: it
// lives 30 s and is renewed every 10 s until it is unlocked.
const DefaultTTL = 30 * time.Second

// DefaultPrefix starts every key dlock writes, unless WithPrefix says
// otherwise.
const DefaultPrefix = "dlock"

// minTTL is the shortest lease Redis can express (PEXPIRE counts in ms).
const minTTL = time.Millisecond

// Option configures a Client.
type Option func(*clientConfig)

type clientConfig struct {
	prefix    string
	sharded   bool
	shardOK   bool // sharded was set explicitly
	sync      replicaSync
	noScripts bool
	drift     drift
	quorum    quorumConfig
}

// WithPrefix sets the prefix of every key and channel the Client uses:
// "<prefix>:{<name>}" for a lock named name. Default: "dlock". The prefix
// must be non-empty and must not contain '{' or '}'.
func WithPrefix(prefix string) Option {
	return func(c *clientConfig) { c.prefix = prefix }
}

// WithShardedPubSub chooses sharded pub/sub (SPUBLISH, SSUBSCRIBE, Redis 7+)
// for wake-ups. Default: on for a *redis.ClusterClient, off otherwise; set
// it when a wrapper hides a cluster client.
func WithShardedPubSub(on bool) Option {
	return func(c *clientConfig) { c.sharded, c.shardOK = on, true }
}

// LockOption configures one lock: pass it to Client.Mutex to set the
// handle's default, or to Lock or TryLock for one call.
type LockOption func(*lockConfig)

type lockConfig struct {
	ttl      time.Duration
	renew    bool
	queueTTL time.Duration
	readers  bool // RWMutex: readers first
}

var defaultLock = lockConfig{ttl: DefaultTTL, renew: true, queueTTL: DefaultQueueTTL}

// DefaultQueueTTL is how long a waiter's place in a queue (FairMutex, a
// writer waiting on an RWMutex) outlives the waiter's last sign of life.
const DefaultQueueTTL = 3 * time.Second

// WithQueueTTL sets how long a waiter's place in a queue — the FairMutex
// queue, or a writer's claim on an RWMutex — lives without a sign of life.
// A waiter renews its place every d/3 while it waits, so a waiter that was
// killed is skipped at most d + d/3 after its last renewal. Default:
// DefaultQueueTTL (3 s). Shorter skips dead waiters sooner and costs more
// renewals. d must be at least 3 ms. Other locks ignore it.
func WithQueueTTL(d time.Duration) LockOption {
	return func(c *lockConfig) { c.queueTTL = d }
}

// WithTTL gives the lease a time to live of d, renewed by the Client's
// watchdog every d/3 until Unlock. Default: DefaultTTL (30 s). A shorter
// TTL frees a crashed holder's lock sooner and costs more renewals. d must
// be at least 1 ms.
func WithTTL(d time.Duration) LockOption {
	return func(c *lockConfig) { c.ttl, c.renew = d, true }
}

// WithLease gives the lease a fixed time to live of d with no renewal: the
// lock frees itself d after it was taken (or last extended), and the
// lease's Done closes just before that, with Err ErrLeaseLost. d must be at
// least 1 ms.
func WithLease(d time.Duration) LockOption {
	return func(c *lockConfig) { c.ttl, c.renew = d, false }
}

// WithReaderPreference lets an RWMutex's readers in while writers wait.
// Default: off — once a writer waits, new readers queue behind it, so a
// steady stream of readers cannot starve writers. With it, readers never
// wait for waiting writers, and writers may starve. Pass it to
// Client.RWMutex so that every reader of the handle uses it. Other locks
// ignore it.
func WithReaderPreference() LockOption {
	return func(c *lockConfig) { c.readers = true }
}

func (c lockConfig) with(opts []LockOption) lockConfig {
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

func (c lockConfig) validate() error {
	if c.ttl < minTTL {
		return invalid("lease TTL %v is below 1ms", c.ttl)
	}
	if c.queueTTL < 3*minTTL {
		return invalid("queue TTL %v is below 3ms", c.queueTTL)
	}
	return nil
}

// drift is the margin a holder keeps between its local deadline and the
// server's expiry: a share of the TTL for clock-rate differences plus a
// fixed slack for timers and scheduling.
type drift struct {
	factor float64
	extra  time.Duration
}

// defaultDrift is 1% of the TTL plus 2 ms, as RedLock's analysis uses.
var defaultDrift = drift{0.01, 2 * time.Millisecond}

func (d drift) of(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*d.factor) + d.extra
}

func (d drift) validate() error {
	if d.factor < 0 || d.factor >= 1 || d.extra < 0 {
		return invalid("clock drift %v of the TTL + %v: want a factor in [0, 1) and a non-negative extra", d.factor, d.extra)
	}
	return nil
}

// WithClockDrift sets the margin every lease keeps between its local
// deadline and the server's expiry: factor × TTL + extra. Default: 0.01 ×
// TTL + 2 ms. Raise it where clocks may run at rates further apart, or
// where a process may stall between reading the clock and acting. For a
// quorum (NewQuorum) the same margin is taken off a lock's validity.
func WithClockDrift(factor float64, extra time.Duration) Option {
	return func(c *clientConfig) { c.drift = drift{factor, extra} }
}
