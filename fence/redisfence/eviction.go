package redisfence

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"
	"weak"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/redis/go-redis/v9"
)

// A Guard refuses what a dlock Client refuses: a server that may evict
// keys (any maxmemory-policy but noeviction). Under an allkeys-* policy a
// cache filling the server evicts a resource's record, the highest fence
// it accepted, and the next write of a stale holder is accepted: the
// record goes back down. Under a volatile-* policy the records stay (they
// carry no TTL), but the receipts of guarded writes do carry one (they
// must end), and they are the first to go: a write sent twice then
// answers ErrStale for a write that is in the store, or runs a second
// time over the same holder's later write. Receipts without a TTL would
// survive, at the cost of one more key per resource that never ends
// while nothing is written; a volatile-* server is refused instead, as
// the Client refuses it (its lock keys carry TTLs).
//
// The check reads INFO memory from the server (every master of a
// cluster, every shard of a ring) before a Guard's first write, and again
// before the first write once the last pass is older than
// WithPolicyRecheck (DefaultPolicyRecheck): a policy changed at run time
// is seen within that long, and no write is let through on a pass older
// than it. The Guards of one go-redis client (*redis.Client,
// *redis.ClusterClient, *redis.Ring) share what they read, so a Guard
// made for each write costs no INFO of its own; one WithEvictionRisk
// reads for itself. Writes made while a check is under way wait for it
// (each within its ctx). A check that refused the server, or could not be
// made, is made again at the next write, so a server that was fixed is
// accepted without a new Guard. A server that refuses INFO (an ACL, a
// proxy) cannot be told: the Guard logs one warning and writes.

// DefaultPolicyRecheck is how long a Guard trusts a passed check of the
// server's eviction policy unless WithPolicyRecheck.
const DefaultPolicyRecheck = 10 * time.Second

// WithEvictionRisk lets a Guard write on a server whose maxmemory-policy
// may evict keys. Without it every write there fails with an error
// matching dlock.ErrEvictionPolicy. With it the Guard writes, and logs
// one warning per policy (WithLogger) naming the risk: an evicted record
// forgets the highest fence accepted, so a stale holder's write is
// accepted and overwrites a newer owner's; an evicted receipt answers a
// re-sent write wrongly. Default: off.
func WithEvictionRisk() Option { return func(g *Guard) { g.evictionRisk = true } }

// WithLogger sets where a Guard's warnings go (WithEvictionRisk, a server
// that refuses INFO). Default: slog.Default().
func WithLogger(l *slog.Logger) Option { return func(g *Guard) { g.log = l } }

// WithPolicyRecheck sets how long a passed check of the server's eviction
// policy is trusted before the next write checks it again (default
// DefaultPolicyRecheck; it must be positive): the longest a policy
// changed at run time goes unseen. Each check is one INFO memory per
// server.
func WithPolicyRecheck(d time.Duration) Option { return func(g *Guard) { g.recheck = d } }

// policyCheck is what the Guards of one client know of its server's
// eviction policy; mu guards the fields.
type policyCheck struct {
	mu     sync.Mutex
	passed time.Time       // when the last check that passed began (monotonic); zero: none
	flight *policyFlight   // the check under way, if any
	warned map[string]bool // warnings given
}

// checks is the policyCheck of each go-redis client that Guards without
// WithEvictionRisk were made of: weak.Pointer of the client ->
// *policyCheck, deleted when the client is collected.
var checks sync.Map

// policyCheckOf returns the policyCheck of a Guard of rdb: the one its
// client's Guards share, or (WithEvictionRisk, whose checks pass where
// others' fail; a client of another type) one of its own.
func policyCheckOf(rdb redis.UniversalClient, risk bool) *policyCheck {
	if !risk {
		switch r := rdb.(type) {
		case *redis.Client:
			return sharedCheck(r)
		case *redis.ClusterClient:
			return sharedCheck(r)
		case *redis.Ring:
			return sharedCheck(r)
		}
	}
	return &policyCheck{}
}

// sharedCheck returns the policyCheck of the client at p.
func sharedCheck[T any](p *T) *policyCheck {
	if p == nil {
		return &policyCheck{}
	}
	k := weak.Make(p)
	if pc, ok := checks.Load(k); ok {
		return pc.(*policyCheck)
	}
	pc, loaded := checks.LoadOrStore(k, &policyCheck{})
	if !loaded {
		runtime.AddCleanup(p, func(k weak.Pointer[T]) { checks.Delete(k) }, k)
	}
	return pc.(*policyCheck)
}

// policyFlight is one check under way: done is closed when err is set.
type policyFlight struct {
	done chan struct{}
	err  error
}

// admit returns nil when the server's eviction policy lets g write (a
// pass younger than g.recheck, or a check now), or the error of the
// check: one matching errs.EvictionPolicy, or one of a check that could
// not be made.
func (g *Guard) admit(ctx context.Context) error {
	pc := g.policy
	for {
		pc.mu.Lock()
		if !pc.passed.IsZero() && time.Since(pc.passed) < g.recheck {
			pc.mu.Unlock()
			return nil
		}
		if f := pc.flight; f != nil {
			pc.mu.Unlock()
			select {
			case <-f.done:
			case <-ctx.Done():
				return fmt.Errorf("redisfence: checking the server's maxmemory-policy: %w", ctx.Err())
			}
			if errors.Is(f.err, errs.EvictionPolicy) {
				return f.err
			}
			continue // passed (seen above), or could not be made: this caller tries, within its ctx
		}
		f := &policyFlight{done: make(chan struct{})}
		pc.flight = f
		pc.mu.Unlock()
		began := time.Now()
		err := g.readPolicies(ctx)
		pc.mu.Lock()
		if err == nil {
			pc.passed = began
		}
		pc.flight = nil
		f.err = err
		close(f.done)
		pc.mu.Unlock()
		return err
	}
}

// readPolicies reads the eviction policy of every server g writes to.
func (g *Guard) readPolicies(ctx context.Context) error {
	each := func(ctx context.Context, n *redis.Client) error {
		info, err := n.Info(ctx, "memory").Result()
		return g.judge(n.Options().Addr+": ", info, err)
	}
	switch r := g.rdb.(type) {
	case *redis.ClusterClient:
		return r.ForEachMaster(ctx, each)
	case *redis.Ring:
		return r.ForEachShard(ctx, each)
	}
	info, err := g.rdb.Info(ctx, "memory").Result()
	return g.judge("", info, err)
}

// judge judges one server's INFO memory reply (where names it on a
// cluster).
func (g *Guard) judge(where, info string, err error) error {
	if rerr, ok := errors.AsType[redis.Error](err); ok {
		g.warnOnce("info", "redisfence: cannot read the server's maxmemory-policy; make sure it is noeviction, "+
			"or an evicted record lets a stale write in", "err", rerr)
		return nil
	}
	if err != nil {
		return fmt.Errorf("redisfence: checking the server's maxmemory-policy (INFO memory): %w", err)
	}
	policy := infoField(info, "maxmemory_policy")
	if policy == "" || policy == "noeviction" {
		return nil
	}
	if g.evictionRisk {
		g.warnOnce("eviction: "+policy, "redisfence: the server may evict the guard's records (WithEvictionRisk): "+
			"an evicted record forgets the highest fence accepted, so a stale holder's write is accepted over a newer owner's, "+
			"and an evicted receipt answers a re-sent write wrongly", "maxmemory_policy", policy)
		return nil
	}
	return fmt.Errorf("%w: redisfence: %smaxmemory-policy is %s: an evicted record forgets the highest fence accepted, "+
		"so a stale holder's write would be accepted, and an evicted receipt answers a re-sent write wrongly; "+
		"set maxmemory-policy noeviction (or accept the risk with redisfence.WithEvictionRisk)", errs.EvictionPolicy, where, policy)
}

// warnOnce logs a warning the first time it is given for key (once for
// the Guards that share g's policyCheck).
func (g *Guard) warnOnce(key, msg string, args ...any) {
	pc := g.policy
	pc.mu.Lock()
	first := !pc.warned[key]
	if first {
		if pc.warned == nil {
			pc.warned = map[string]bool{}
		}
		pc.warned[key] = true
	}
	pc.mu.Unlock()
	if first {
		g.log.Warn(msg, args...)
	}
}
