package dlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// errNeedsScripts is returned by what cannot work without Lua.
func errNeedsScripts(what string) error {
	return fmt.Errorf("dlock: %s needs Lua scripts, and the client was made WithoutScripts: %w",
		what, errors.ErrUnsupported)
}

// casMode is how a plain lock compares and acts without scripts.
type casMode int

const (
	casWatch   casMode = iota // WATCH / GET / MULTI ... EXEC
	casDelex                  // Redis 8.4: DELEX key IFEQ v, SET key v IFEQ v PX ttl
	casDelifeq                // Valkey 9: DELIFEQ key v, SET key v IFEQ v PX ttl
)

// pickCAS chooses the mode from the commands the server knows (lower
// case names).
func pickCAS(known map[string]bool) casMode {
	switch {
	case known["delex"]:
		return casDelex
	case known["delifeq"]:
		return casDelifeq
	}
	return casWatch
}

// casDetector asks the server once which commands it has.
type casDetector struct {
	once sync.Once
	mode casMode
}

func (d *casDetector) get(ctx context.Context, r Redis) casMode {
	d.once.Do(func() {
		known := map[string]bool{}
		// COMMAND INFO answers nil for a name it does not know.
		res, err := r.Do(ctx, "COMMAND", "INFO", "delex", "delifeq").Slice()
		if err == nil {
			for _, v := range res {
				if info, ok := v.([]any); ok && len(info) > 0 {
					if name, ok := info[0].(string); ok {
						known[strings.ToLower(name)] = true
					}
				}
			}
		}
		d.mode = pickCAS(known)
	})
	return d.mode
}

// plain is the script-free backend (WithoutScripts): it runs only a
// Mutex, with transactions.
type plain struct {
	rdb     Redis
	publish string
	cas     casDetector
}

func (b *plain) supports(what string) error {
	if what == "Mutex" {
		return nil
	}
	return errNeedsScripts(what)
}

func (b *plain) oneScript() bool { return false }
func (b *plain) close()          {}

// grant runs o: transactions have no replica sync (New refuses the mix).
func (b *plain) grant(ctx context.Context, o op) *redis.Cmd { return o.run(ctx, b.rdb) }

// batch runs the transactions side by side: they cannot share a pipeline.
func (b *plain) batch(ctx context.Context, ops []op, _ bool) []*redis.Cmd {
	return sideBySide(ctx, b.rdb, ops)
}

// everywhere is never called: without scripts nobody registers as a
// waiter.
func (b *plain) everywhere(context.Context, call) error { return nil }

func (b *plain) handsOff() bool { return false }

func (b *plain) attempt(c *Client, r *request, token, _ string, cfg lockConfig) (protocol, attemptFunc) {
	p := plainProto{r.k, b}
	return p, func(ctx context.Context, _ bool, _ string) (*Lease, time.Duration, error) {
		return b.lock(ctx, c, p, token, cfg)
	}
}

// lock is one acquire of a Mutex without scripts.
func (b *plain) lock(ctx context.Context, c *Client, p plainProto, token string, cfg lockConfig) (*Lease, time.Duration, error) {
	k := p.k
	start := time.Now()
	var fence *redis.IntCmd
	var get *redis.StringCmd
	var pttl *redis.DurationCmd
	_, err := b.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		fence = p.Incr(ctx, k.fence)
		p.SetNX(ctx, k.lock, token, cfg.ttl)
		get = p.Get(ctx, k.lock)
		pttl = p.PTTL(ctx, k.lock)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, 0, redisErr("lock", k.name, err)
	}
	if get.Val() != token {
		ms := int64(-1)
		if d := pttl.Val(); d >= 0 {
			ms = d.Milliseconds()
		}
		return nil, retryAfter(ms, cfg.ttl), nil
	}
	// Ours — by this transaction, or by an earlier one whose reply was lost
	// and that go-redis sent again: then the fence of this one, still above
	// every earlier owner's.
	l, err := c.newLease(ctx, newHold(c, k, "Mutex", p, token, fence.Val(), cfg, start))
	return l, 0, err
}

// plainProto is the Redis side of a Mutex hold without scripts.
type plainProto struct {
	k *keys
	b *plain
}

// plainOp is a transaction with the integer reply of the protocol.
type plainOp func(ctx context.Context, r Redis) (int64, error)

func (f plainOp) run(ctx context.Context, r Redis) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	v, err := f(ctx, r)
	if err != nil {
		cmd.SetErr(err)
	} else {
		cmd.SetVal(v)
	}
	return cmd
}

// release deletes the key if it still holds token, and tells waiters.
func (p plainProto) release(token string, _ int) op {
	return plainOp(func(ctx context.Context, r Redis) (int64, error) {
		var deleted bool
		switch p.b.cas.get(ctx, r) {
		case casDelex:
			n, err := r.Do(ctx, "DELEX", p.k.lock, "IFEQ", token).Int64()
			deleted = n == 1
			if err != nil {
				return 0, err
			}
		case casDelifeq:
			n, err := r.Do(ctx, "DELIFEQ", p.k.lock, token).Int64()
			deleted = n == 1
			if err != nil {
				return 0, err
			}
		default:
			var err error
			deleted, err = compareAndDo(ctx, r, p.k.lock, token, nil, func(p redis.Pipeliner, key string) {
				p.Del(ctx, key)
			})
			if err != nil {
				return 0, err
			}
		}
		if !deleted {
			return -1, nil
		}
		// A lost message costs a waiter at most the lease it was told.
		_ = r.Do(ctx, strings.ToLower(p.b.publish), p.k.channel, wakeOne).Err()
		return 1, nil
	})
}

// renew sets the key's TTL if it still holds token: to exactly ttl, or
// (not exact) to at least ttl, which needs the WATCH transaction.
func (p plainProto) renew(token string, ttl time.Duration, exact bool) op {
	return plainOp(func(ctx context.Context, r Redis) (int64, error) {
		if exact && p.b.cas.get(ctx, r) != casWatch {
			err := r.Do(ctx, "SET", p.k.lock, token, "IFEQ", token, "PX", ttl.Milliseconds()).Err()
			if errors.Is(err, redis.Nil) {
				return 0, nil
			}
			return 1, err
		}
		var atLeast func(*redis.Tx) (bool, error)
		if !exact {
			atLeast = func(tx *redis.Tx) (bool, error) {
				left, err := tx.PTTL(ctx, p.k.lock).Result()
				return left < ttl, err
			}
		}
		ok, err := compareAndDo(ctx, r, p.k.lock, token, atLeast, func(p redis.Pipeliner, key string) {
			p.PExpire(ctx, key, ttl)
		})
		if ok {
			return 1, err
		}
		return 0, err
	})
}

// ttl returns the key's PTTL if it holds token, else -3.
func (p plainProto) ttl(token string) op {
	return plainOp(func(ctx context.Context, r Redis) (int64, error) {
		var get *redis.StringCmd
		var pttl *redis.DurationCmd
		_, err := r.TxPipelined(ctx, func(pl redis.Pipeliner) error {
			get = pl.Get(ctx, p.k.lock)
			pttl = pl.PTTL(ctx, p.k.lock)
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return 0, err
		}
		if get.Val() != token {
			return -3, nil
		}
		return pttl.Val().Milliseconds(), nil
	})
}

// compareAndDo runs act on key in a transaction if key holds want, with
// WATCH so that a change between the read and EXEC aborts it (and it is
// tried again). If cond is set and says no (read under the same WATCH),
// act is not needed: the key is still want's and compareAndDo reports
// true. Otherwise it reports whether act ran.
func compareAndDo(ctx context.Context, r Redis, key, want string, cond func(*redis.Tx) (bool, error),
	act func(redis.Pipeliner, string)) (bool, error) {
	for range 5 {
		done := false
		err := r.Watch(ctx, func(tx *redis.Tx) error {
			v, err := tx.Get(ctx, key).Result()
			if errors.Is(err, redis.Nil) || (err == nil && v != want) {
				return nil
			}
			if err != nil {
				return err
			}
			if cond != nil {
				needed, err := cond(tx)
				if err != nil || !needed {
					done = err == nil
					return err
				}
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				act(p, key)
				return nil
			})
			done = err == nil
			return err
		}, key)
		if gaveUp(err) {
			return false, err // done is not ours to read: fn may still run
		}
		if !errors.Is(err, redis.TxFailedErr) {
			return done, err
		}
	}
	return false, fmt.Errorf("dlock: %q kept changing during compare-and-set", key)
}
