package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/bsm/redislock"
	"github.com/dlock-go/dlock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

// lockTTL is the lease every implementation is given: long enough that no
// lock expires, and no renewal is due, while a benchmark runs.
const lockTTL = 10 * time.Second

// redislockRetry is the poll interval of redislock's blocking acquire. The
// library has no blocking mode of its own: a caller passes a retry
// strategy, and its examples use LinearBackoff(100ms) (and 500ms).
const redislockRetry = 100 * time.Millisecond

// backendNames lists the implementations, dlock first, in table order.
var backendNames = []string{"dlock", "redsync", "redislock", "rueidislock"}

// anchorNames are the implementations dlock is measured against.
var anchorNames = backendNames[1:]

// mutex is one goroutine's handle on one lock key. Lock blocks until the
// lock is held or ctx ends; Unlock releases what the last Lock took. A
// mutex is used by one goroutine at a time (redsync's handle needs that).
type mutex interface {
	Lock(ctx context.Context) error
	Unlock(ctx context.Context) error
}

// backend is one implementation set up as its users would: one client
// with default settings, shared by every goroutine of the process, and the
// lock configured only where blocking needs it (see README.md).
type backend struct {
	name string
	// newMutex returns a handle on key for one goroutine.
	newMutex func(key string) mutex
	// newReader, if set, returns a handle on the read (shared) side of
	// key's lock for one goroutine: an RWMutex's. Without it reads are
	// exclusive, taken through newMutex.
	newReader func(key string) mutex
	// capacity is how many holders of newMutex's handles the lock admits
	// at once: a semaphore's permits; 0 means 1.
	capacity int
	close    func()
}

// openBackend connects the named implementation to the server at addr.
// Close the backend when done.
func openBackend(name, addr string) (*backend, error) {
	if kind, ok := dlockKinds[name]; ok {
		return dlockOn(name, redis.NewClient(&redis.Options{Addr: addr}), kind)
	}
	switch name {
	case "redsync":
		return redsyncOn(name, redis.NewClient(&redis.Options{Addr: addr})), nil
	case "redislock":
		return redislockOn(name, redis.NewClient(&redis.Options{Addr: addr})), nil
	case "rueidislock":
		return rueidislockOn(name, addr)
	}
	return nil, fmt.Errorf("bench: unknown implementation %q", name)
}

// dlockKinds are the dlock locks that openBackend knows, by name: each
// makes a backend's handles from a Client. The family's are in
// family_test.go.
var dlockKinds = map[string]func(*dlock.Client, *backend){
	"dlock":           dlockMutexes,
	"dlock-fair":      dlockFairMutexes,
	"dlock-rwmutex":   dlockRWMutexes,
	"dlock-semaphore": dlockSemaphores,
}

// dlock: Mutex.Lock waits (woken by pub/sub); the lease is auto-renewed,
// as by default, with a TTL of lockTTL.

// dlockOn makes a dlock Client on rdb and a backend whose handles kind
// makes; closing the backend closes both.
func dlockOn(name string, rdb redis.UniversalClient, kind func(*dlock.Client, *backend)) (*backend, error) {
	c, err := dlock.New(rdb)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	be := &backend{name: name, close: func() {
		_ = c.Close()
		_ = rdb.Close()
	}}
	kind(c, be)
	return be, nil
}

// dlockMutexes makes be's handles Mutexes of c.
func dlockMutexes(c *dlock.Client, be *backend) {
	be.newMutex = func(key string) mutex {
		return &dlockMutex{m: c.Mutex(key, dlock.WithTTL(lockTTL))}
	}
}

// dlockMutex is a handle on any dlock Locker: Mutex, FairMutex, or one
// side of an RWMutex.
type dlockMutex struct {
	m dlock.Locker
	l *dlock.Lease
}

func (d *dlockMutex) Lock(ctx context.Context) (err error) {
	d.l, err = d.m.Lock(ctx)
	return err
}

func (d *dlockMutex) Unlock(ctx context.Context) error { return d.l.Unlock(ctx) }

// redsync on one pool per Redis client (one client: quorum 1): Lock
// polls with the default random 50–250 ms delay; WithTries makes it wait
// as long as needed.

func redsyncOn(name string, rdbs ...redis.UniversalClient) *backend {
	pools := make([]redsyncredis.Pool, len(rdbs))
	for i, rdb := range rdbs {
		pools[i] = goredis.NewPool(rdb)
	}
	rs := redsync.New(pools...)
	return &backend{
		name: name,
		newMutex: func(key string) mutex {
			return redsyncMutex{rs.NewMutex(key,
				redsync.WithExpiry(lockTTL), redsync.WithTries(math.MaxInt32))}
		},
		close: func() {
			for _, rdb := range rdbs {
				_ = rdb.Close()
			}
		},
	}
}

type redsyncMutex struct{ m *redsync.Mutex }

func (r redsyncMutex) Lock(ctx context.Context) error { return r.m.LockContext(ctx) }

func (r redsyncMutex) Unlock(ctx context.Context) error {
	ok, err := r.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: unlock reported failure")
	}
	return err
}

// redislock: Obtain polls every redislockRetry until ctx's deadline.

func redislockOn(name string, rdb redis.UniversalClient) *backend {
	c := redislock.New(rdb)
	// LinearBackoff keeps no state, so one Options may serve every call.
	opts := &redislock.Options{RetryStrategy: redislock.LinearBackoff(redislockRetry)}
	return &backend{
		name: name,
		newMutex: func(key string) mutex {
			return &redislockMutex{c: c, key: key, opts: opts}
		},
		close: func() { _ = rdb.Close() },
	}
}

type redislockMutex struct {
	c    *redislock.Client
	key  string
	opts *redislock.Options
	l    *redislock.Lock
}

func (r *redislockMutex) Lock(ctx context.Context) (err error) {
	r.l, err = r.c.Obtain(ctx, r.key, lockTTL, r.opts)
	return err
}

func (r *redislockMutex) Unlock(ctx context.Context) error { return r.l.Release(ctx) }

// rueidislock with one key (KeyMajority 1) on one node, or on a cluster
// when given its nodes: WithContext waits for a client-side-caching
// invalidation, or a local release, of the key; the lock is extended in
// the background, as by default.

func rueidislockOn(name string, addrs ...string) (*backend, error) {
	lk, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption:   rueidis.ClientOption{InitAddress: addrs},
		KeyMajority:    1,
		KeyValidity:    lockTTL,
		NoLoopTracking: true, // as its README advises for Redis >= 7.0.5
	})
	if err != nil {
		return nil, err
	}
	return &backend{
		name: name,
		newMutex: func(key string) mutex {
			return &rueidisMutex{lk: lk, key: key}
		},
		close: lk.Close,
	}, nil
}

type rueidisMutex struct {
	lk     rueidislock.Locker
	key    string
	cancel context.CancelFunc
}

func (r *rueidisMutex) Lock(ctx context.Context) (err error) {
	_, r.cancel, err = r.lk.WithContext(ctx, r.key)
	return err
}

// Unlock cancels the lock's context; the returned function deletes the key
// and waits for that before it returns.
func (r *rueidisMutex) Unlock(context.Context) error {
	r.cancel()
	return nil
}
