package dlock

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/acquisition"
	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/deploy"
	"github.com/dlock-go/dlock/internal/hold"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/transport"
	"github.com/dlock-go/dlock/internal/wake"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/goredis"
	"github.com/dlock-go/dlock/internal/telemetry"
	"github.com/redis/go-redis/v9"
)

// Client makes locks on one Redis deployment. It owns one watchdog
// goroutine, which renews every auto-renewed lease and signals lost ones,
// and, once a Lock has had to wait, one pub/sub connection that wakes
// waiters when a lock is released.
//
// A Client is safe for concurrent use. Close it when done: Close ends the
// leases still held and releases their locks, then stops its goroutines.
type Client struct {
	rdb     driver.Driver   // nil for a quorum
	be      backend.Backend // the deployment
	prefix  string
	publish string // PUBLISH or SPUBLISH
	// fence is the fence counter every lock shares, or "" for one per
	// cluster slot (internal/protocol/doc.go, "Fence counters").
	fence string
	// id names this Client's waiters in Redis and its wake-up channel.
	id   string
	caps backend.Caps // what be can do (be.caps(), asked once)
	// resendAfter: a call may be sent twice by the client library when
	// its reply takes this long (the least of the nodes'
	// driver.Info.ResendAfter; 0: never). See "Acquires sent twice" in
	// internal/acquisition/acquisition.go.
	resendAfter time.Duration
	topo        *transport.Topology // a cluster's shape: its slot map refreshed, a hold's call run again

	life   context.Context // cancelled by Close
	cancel context.CancelFunc
	holds  *hold.Keeper          // its holds: made, renewed, ended, released
	acq    *acquisition.Acquirer // its acquire path
	hubs   []*wake.Hub           // wake-ups: one per Redis node (one but for a quorum)
	nodes  []driver.Driver       // the Redis nodes: one but for a quorum
	drift  backend.Drift
	tel    *telemetry.Telemetry
	dep    *deploy.Deployment // its checks, refusals, fence fold and owner record
	wake   *protocol.WakeTo   // where releases wake this Client's waiters (not sharded)
	hints  protocol.Hints     // whether its mutexes were found contended lately (internal/protocol/doc.go, "Fast scripts")
	waitOn string             // its own wake-up channel (not sharded): wake's base and its id, made once

	own       []io.Closer // drivers New or NewQuorum made: closed by Close
	closeOnce sync.Once
	// leading: the elections this Client leads, by lock key, so that a
	// Campaign of an election it leads proclaims instead of waiting on
	// itself (election.go).
	leading sync.Map
	// owners are the owner records a BusyError read lately (busy.go)
	owners ownerCache
	// deadlockDelay is how long a wait that holds leases waits before it
	// looks for a deadlock (WithDeadlockDelay); 0: it never does
	// (WithoutDeadlockDetection, or a quorum: deadlock_detect.go).
	deadlockDelay time.Duration
}

// Redis is what New needs of a go-redis v9 client. Every go-redis client
// has it (*redis.Client, *redis.ClusterClient, the failover client, and so
// redis.UniversalClient).
type Redis interface {
	Process(ctx context.Context, cmd redis.Cmder) error
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
	SSubscribe(ctx context.Context, channels ...string) *redis.PubSub
	Watch(ctx context.Context, fn func(*redis.Tx) error, keys ...string) error
}

// GoRedisDriver returns the Driver that New uses for rdb: to wrap it (a
// test injecting faults at the seam), or to hand it to NewWithDriver. On
// a *redis.Client its commands go on connections of its own (see New);
// they close when it is closed (it is an io.Closer: a Client made by
// NewWithDriver does not close it), when rdb is closed (found at the next
// pipeline, such as the watchdog's renewals, or dial; calls then fail
// with an error wrapping redis.ErrClosed), or, once it is garbage, when the
// runtime finalizes their sockets (no goroutine of its keeps them).
func GoRedisDriver(rdb Redis) driver.Driver { return goredis.Own(rdb) }

// goRedis returns the go-redis driver of rdb that New and NewQuorum use:
// on dlock's own connections unless cfg says WithoutOwnConnections.
func goRedis(rdb Redis, cfg clientConfig) *goredis.Driver {
	if cfg.throughClient {
		return goredis.New(rdb)
	}
	return goredis.Own(rdb)
}

// New returns a Client that takes its locks on rdb, a go-redis client. It
// starts the watchdog goroutine; call Close to stop it. New returns an
// error wrapping ErrInvalidArgument when rdb is nil or an option is
// invalid.
//
// On a *redis.Client of a single server and on a *redis.ClusterClient
// (each master of the cluster, which the client's slot map names, MOVED
// and ASK replies followed) the Client sends its commands on connections
// of its own, made from
// rdb's options (its Dialer, credentials, database, client name,
// timeouts and MaxRetries; not its hooks or pool): one connection shared
// by all its calls, whose commands go out together, and a few for WAIT
// and transactions. A call returns when its ctx ends, without a
// goroutine of its own. It is never sent again after a timeout (its first
// copy may still run); after a refused, reset or closed connection it is
// sent again on a new one, MaxRetries times at most. A failover client
// (redis.NewFailoverClient), whose pool alone follows the sentinels to a
// new master, a client with an OnConnect hook or streaming credentials
// (or a cluster's with its own ClusterSlots), and any client under
// WithoutOwnConnections are used as they are; pub/sub always goes
// through rdb.
func New(rdb Redis, opts ...Option) (*Client, error) {
	if rdb == nil {
		return nil, invalid("nil Redis client")
	}
	cfg, err := configure(opts)
	if err != nil {
		return nil, err
	}
	d := goRedis(rdb, cfg)
	c, err := NewWithDriver(d, opts...)
	if err != nil {
		_ = d.Close()
		return nil, err
	}
	c.own = []io.Closer{d}
	return c, nil
}

// NewWithDriver returns a Client that reaches Redis through d: the way
// the packages rueidisdlock and valkeydlock make their Clients, and a
// test's way to wrap a client library to inject faults. It is New in all
// else.
func NewWithDriver(d driver.Driver, opts ...Option) (*Client, error) {
	if d == nil {
		return nil, invalid("nil Driver")
	}
	cfg, err := configure(opts)
	if err != nil {
		return nil, err
	}
	if cfg.quorumSet {
		return nil, invalid("WithNodeTimeout and WithRetryJitter apply to NewQuorum only")
	}
	if !cfg.shardOK {
		cfg.sharded = d.Info().Cluster
	}
	if !cfg.slotFencesSet {
		cfg.slotFences = d.Info().Cluster
	}
	tel := newTelemetry(cfg)
	dep := newDeployment(cfg, tel)
	rdb := transport.Stack(d, dep)
	var be backend.Backend
	if cfg.noScripts {
		be = backend.NewPlain(rdb, publishCommand(cfg.sharded))
	} else {
		be = backend.NewSingle(rdb, cfg.sharded, cfg.sync)
	}
	return start(be, []driver.Driver{rdb}, cfg, tel, dep), nil
}

// publishCommand is how releases are published: SPUBLISH with sharded
// pub/sub, PUBLISH otherwise.
func publishCommand(sharded bool) string {
	if sharded {
		return "SPUBLISH"
	}
	return "PUBLISH"
}

// configure applies and checks the options.
func configure(opts []Option) (clientConfig, error) {
	cfg := clientConfig{prefix: DefaultPrefix, drift: defaultDrift}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if !protocol.ValidPrefix(cfg.prefix) {
		return clientConfig{}, invalid("key prefix %q: must be non-empty, without '{' or '}'", cfg.prefix)
	}
	if err := cfg.sync.Validate(); err != nil {
		return clientConfig{}, err
	}
	if err := cfg.drift.Validate(); err != nil {
		return clientConfig{}, err
	}
	if d := cfg.deadlockDelay; cfg.deadlockSet && (d <= 0 || d > time.Hour) {
		return clientConfig{}, invalid("WithDeadlockDelay(%v): must be positive and at most an hour", d)
	}
	if !cfg.deadlockSet {
		cfg.deadlockDelay = defaultDeadlockDelay
	}
	if cfg.noScripts && cfg.sync != (backend.ReplicaSync{}) {
		return clientConfig{}, invalid("WithoutScripts and WithReplicaSync cannot be combined")
	}
	return cfg, nil
}

// newDeployment is what a Client will learn of its deployment, reported
// through tel: built before the driver stack, which reports to it.
func newDeployment(cfg clientConfig, tel *telemetry.Telemetry) *deploy.Deployment {
	return deploy.New(deploy.Config{Prefix: cfg.prefix, Publish: publishCommand(cfg.sharded), EvictionRisk: cfg.evictionRisk,
		NoOwner: cfg.noOwner || cfg.noScripts, Label: cfg.label, Tel: tel})
}

// start makes a Client on a backend with a hub per node, and starts its
// watchdog.
func start(be backend.Backend, nodes []driver.Driver, cfg clientConfig, tel *telemetry.Telemetry, dep *deploy.Deployment) *Client {
	c := &Client{be: be, prefix: cfg.prefix, publish: publishCommand(cfg.sharded), drift: cfg.drift,
		id: randomHex(8), caps: be.Caps(), tel: tel, dep: dep}
	if len(nodes) == 1 {
		c.rdb = nodes[0]
		if !cfg.noDeadlocks {
			c.deadlockDelay = cfg.deadlockDelay
		}
	}
	if !cfg.slotFences {
		c.fence = protocol.FenceKey(cfg.prefix, "", false)
	}
	w := c.wakeTo(&protocol.Keys{})
	c.wake = &w
	own := ""
	if !cfg.sharded {
		own = c.wakeTo(&protocol.Keys{}).Base + c.id
		c.waitOn = own
	}
	for _, n := range nodes {
		if r := n.Info().ResendAfter; r > 0 && (c.resendAfter == 0 || r < c.resendAfter) {
			c.resendAfter = r
		}
		c.hubs = append(c.hubs, wake.New(n, wake.Config{Sharded: cfg.sharded, Own: own, ID: c.id, Closed: ErrClosed}))
		c.nodes = append(c.nodes, n)
	}
	c.topo = transport.NewTopology(c.rdb)
	c.life, c.cancel = context.WithCancel(context.Background())
	c.holds = hold.NewKeeper(hold.Env{Backend: be, Drift: cfg.drift, Tel: tel, Life: c.life, Topology: c.topo})
	var timeout time.Duration // a quorum's node timeout bounds its checks of one node
	var folds *transport.Folds
	if q, ok := be.(*backend.Quorum); ok {
		timeout, folds = q.NodeTimeout(), q.Folds()
	}
	dep.Attach(deploy.Reach{Nodes: c.nodes, NodeTimeout: timeout, Fence: c.fence, ID: c.id, Folds: folds,
		Everywhere: be.Everywhere, Life: c.life, Background: c.holds.Background})
	c.acq = acquisition.New(acquisition.Config{Backend: be, Dep: dep, Tel: tel, Hubs: c.hubs, Holds: c.holds, Drift: cfg.drift,
		ResendAfter: c.resendAfter, Topology: c.topo, Life: c.life,
		GaveBack: func(err error) bool { _, ok := errors.AsType[*QuorumError](err); return ok }})
	return c
}

// Close ends the Client, as a graceful shutdown (a rolling deploy) wants:
// waits in progress return ErrClosed; leases still held end with Err
// ErrClosed (Done closes) and are then released in Redis, so that other
// clients get the locks at once rather than after their TTL; releases
// still being retried after a failed Unlock make a last try. Close blocks
// until that is done, for about cleanupTimeout (2 s) at most when Redis does
// not answer (the locks then expire after their TTL), and stops the
// watchdog and pub/sub connections. An acquire or an Unlock that fails
// while Close runs makes its own last bounded try, on a goroutine of its
// own that Close does not wait for, so that the call still returns
// within its ctx. Close does not close the Redis client.
// It is safe to call more than once.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.cancel()
		c.holds.Close() // the watchdog ends and releases the holds still there
		ctx, cancel := hold.Bounded(context.Background())
		c.dep.Forget(ctx) // its owner record
		cancel()
		c.be.Close()
		for _, h := range c.hubs {
			h.Close()
		}
		for _, d := range c.own {
			_ = d.Close()
		}
	})
	return nil
}

// closed reports whether Close has been called.
func (c *Client) closed() bool { return c.life.Err() != nil }

// wakeTo says where releases of the lock k wake its waiters: each
// waiter's Client has a channel of its own, base + its id. On a single
// node that is one channel per Client, <prefix>:wake:<id>, for every lock;
// with sharded pub/sub (a cluster) a channel must live in the slot of the
// keys of the script that publishes on it, so there it is per lock,
// <lock>:wake:<id>.
func (c *Client) wakeTo(k *protocol.Keys) protocol.WakeTo {
	if k.Wake != nil {
		return *k.Wake
	}
	base := c.prefix + ":wake:"
	if c.publish == "SPUBLISH" {
		base = k.Lock + ":wake:"
	}
	// Boxed once: a string made an interface costs an allocation.
	return protocol.WakeTo{Base: base, Publish: c.publish, Reserve: c.caps.Reserve, BaseArg: base, PublishArg: c.publish}
}

// member is how a waiter of this Client is registered in Redis
// (protocol.Member).
func (c *Client) member(token string, need int, handOff time.Duration) string {
	return protocol.Member(c.id, token, need, handOff)
}

// keys returns the Redis names of the lock of kind kd called name.
// Where its releases wake its waiters is worked out once, here.
func (c *Client) keys(kd *protocol.Kind, name string) *protocol.Keys {
	k := protocol.NewKeysOf(c.prefix, kd, name, c.fence)
	if k.MutexWords != nil { // a mutex's (an Election's)
		k.Hint = c.hints.For(k.Lock) // every handle of the lock shares it
	}
	if c.publish != "SPUBLISH" {
		k.Wake = c.wake // one channel per Client: shared by its locks
		return k
	}
	w := c.wakeTo(k)
	k.Wake = &w
	return k
}

// cluster reports whether the Client runs on a Redis Cluster.

// Health returns nil, or an error saying what the deployment refuses that
// the Client works around at a cost. It is an error matching
// ErrPubSubRefused once the Client found that its ACL user may not publish
// on its channels (the check of the first Lock or TryLock, or a release
// whose wake-up was refused): locks stay correct, but releases wake
// nobody, so every wait polls (from 16 ms, doubling, up to 256 ms) and
// costs that much more. The Client also logs it once (WithLogger). Health
// does no I/O and does not block.
func (c *Client) Health() error { return c.dep.Refused() }
