package backend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/transport"

	"github.com/dlock-go/dlock/driver"
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

func (d *casDetector) get(ctx context.Context, r driver.Driver) casMode {
	d.once.Do(func() {
		known := map[string]bool{}
		// COMMAND INFO answers nil for a name it does not know.
		res, err := r.Do(ctx, protocol.Cmd("COMMAND", "INFO", "delex", "delifeq")).Slice()
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
	rdb     driver.Driver
	publish string
	cas     casDetector
}

// Caps: a plain Mutex, not re-entrant; releases are published on the
// lock's channel, nothing is handed off, and no token is buried (a late
// SET NX of an acquire given up on takes the lock for its TTL at most:
// docs/deployments.md).
func (b *plain) Caps() Caps { return Caps{NotThere: errNeedsScripts, Reserve: true} }
func (b *plain) Close()     {}

// Grant runs o: transactions have no replica sync (New refuses the mix).
func (b *plain) Grant(ctx context.Context, o Op) driver.Reply { return o.Run(ctx, b.rdb) }
func (b *plain) Run(ctx context.Context, o Op) driver.Reply   { return o.Run(ctx, b.rdb) }

// Batch runs the transactions side by side: they cannot share a pipeline.
func (b *plain) Batch(ctx context.Context, ops []Op, _ bool) []driver.Reply {
	return SideBySide(ctx, b.rdb, ops)
}

// Everywhere runs no script: without scripts nobody registers as a waiter
// or buries a token, and a script-free Client writes no owner record
// (deploy.Config.NoOwner), so nothing calls it; a caller that did would be told.
func (b *plain) Everywhere(context.Context, protocol.Call) error {
	return fmt.Errorf("%w: a script call on a Client made WithoutScripts", errors.ErrUnsupported)
}

func (b *plain) Attempt(a *AttemptSpec) (HoldOps, AttemptFunc) {
	p := plainProto{a.K, b}
	return p, func(ctx context.Context, _, _ bool) (Outcome, error) {
		return b.lock(ctx, a.K, a.Token, a.Cfg)
	}
}

// lock is one acquire of a Mutex without scripts.
func (b *plain) lock(ctx context.Context, k *protocol.Keys, token string, cfg LockConfig) (Outcome, error) {
	start := time.Now()
	res, err := transaction(ctx, b.rdb, k.Lock, protocol.Keyed("INCR", k.Fence),
		protocol.Keyed("SET", k.Lock, token, "NX", "PX", cfg.TTL.Milliseconds()), protocol.Keyed("GET", k.Lock), protocol.Keyed("PTTL", k.Lock))
	if err != nil {
		return Outcome{}, errs.Redis("lock", k.Name, err)
	}
	if holder, _ := res[2].Text(); holder != token {
		ms, err := res[3].Int64()
		if err != nil || ms < 0 {
			ms = -1
		}
		return Outcome{Wait: RetryAfter(ms, cfg.TTL)}, nil
	}
	fence, err := res[0].Int64()
	if err != nil {
		return Outcome{}, errs.Redis("lock", k.Name, err)
	}
	// Ours — by this transaction, or by an earlier one whose reply was lost
	// and that go-redis sent again: then the fence of this one, still above
	// every earlier owner's.
	return Outcome{Granted: true, Fence: fence, Start: start}, nil
}

// plainProto is the Redis side of a Mutex hold without scripts.
type plainProto struct {
	k *protocol.Keys
	b *plain
}

// plainOp is a transaction with the integer reply of the protocol.
type plainOp func(ctx context.Context, r driver.Driver) (int64, error)

func (f plainOp) Run(ctx context.Context, r driver.Driver) driver.Reply {
	v, err := f(ctx, r)
	if err != nil {
		return protocol.FailedReply(err)
	}
	return driver.Reply{Val: v}
}

// transaction runs cmds in MULTI/EXEC on the connection of key's node and
// returns their replies.
func transaction(ctx context.Context, d driver.Driver, key string, cmds ...driver.Command) ([]driver.Reply, error) {
	var out []driver.Reply
	err := d.Dedicated(ctx, key, func(conn driver.Conn) error {
		var err error
		out, err = exec(ctx, conn, cmds)
		return err
	})
	if err != nil {
		return nil, err // out is not ours to read if ctx ended (transport.GaveUp)
	}
	if out == nil {
		return nil, errTxFailed // no WATCH: cannot happen
	}
	return out, nil
}

// errTxFailed is an EXEC that a WATCH aborted.
var errTxFailed = errors.New("dlock: transaction aborted")

// exec sends MULTI, cmds, EXEC on conn and returns the replies of cmds,
// or nil when a WATCH aborted the transaction.
func exec(ctx context.Context, conn driver.Conn, cmds []driver.Command) ([]driver.Reply, error) {
	all := append(append([]driver.Command{protocol.Cmd("MULTI")}, cmds...), protocol.Cmd("EXEC"))
	rs := conn.Pipeline(ctx, all)
	for _, r := range rs[:len(rs)-1] {
		if r.Err != nil {
			return nil, r.Err
		}
	}
	last := rs[len(rs)-1]
	if last.Err != nil {
		return nil, last.Err
	}
	if last.Val == nil {
		return nil, nil
	}
	vs, err := last.Slice()
	if err != nil || len(vs) != len(cmds) {
		return nil, fmt.Errorf("dlock: EXEC: unexpected reply")
	}
	out := make([]driver.Reply, len(vs))
	for i, v := range vs {
		if e, ok := v.(error); ok {
			out[i] = protocol.FailedReply(e)
		} else {
			out[i] = driver.Reply{Val: v}
		}
	}
	return out, nil
}

// Release deletes the key if it still holds token, and tells waiters.
func (p plainProto) Release(token string, _ int, _ int64) Op {
	return plainOp(func(ctx context.Context, r driver.Driver) (int64, error) {
		var deleted bool
		switch p.b.cas.get(ctx, r) {
		case casDelex:
			n, err := r.Do(ctx, protocol.Keyed("DELEX", p.k.Lock, "IFEQ", token)).Int64()
			deleted = n == 1
			if err != nil {
				return 0, err
			}
		case casDelifeq:
			n, err := r.Do(ctx, protocol.Keyed("DELIFEQ", p.k.Lock, token)).Int64()
			deleted = n == 1
			if err != nil {
				return 0, err
			}
		default:
			var err error
			deleted, err = compareAndDo(ctx, r, p.k.Lock, token, 0, protocol.Keyed("DEL", p.k.Lock))
			if err != nil {
				return 0, err
			}
		}
		if !deleted {
			return -1, nil
		}
		// A lost message costs a waiter at most the lease it was told.
		_ = r.Do(ctx, protocol.Keyed(strings.ToLower(p.b.publish), p.k.Channel, protocol.WakeOne))
		return 1, nil
	})
}

// Renew sets the key's TTL if it still holds token: to exactly ttl, or
// (not exact) to at least ttl, which needs the WATCH transaction.
func (p plainProto) Renew(token string, ttl time.Duration, exact bool, _ int64) Op {
	return plainOp(func(ctx context.Context, r driver.Driver) (int64, error) {
		if exact && p.b.cas.get(ctx, r) != casWatch {
			res := r.Do(ctx, protocol.Keyed("SET", p.k.Lock, token, "IFEQ", token, "PX", ttl.Milliseconds()))
			if res.Err == nil && res.Val == nil {
				return 0, nil
			}
			return 1, res.Err
		}
		atLeast := time.Duration(0)
		if !exact {
			atLeast = ttl
		}
		ok, err := compareAndDo(ctx, r, p.k.Lock, token, atLeast, protocol.Keyed("PEXPIRE", p.k.Lock, ttl.Milliseconds()))
		if ok {
			return 1, err
		}
		return 0, err
	})
}

// TTL returns the key's PTTL if it holds token, else -3.
func (p plainProto) TTL(token string) Op {
	return plainOp(func(ctx context.Context, r driver.Driver) (int64, error) {
		res, err := transaction(ctx, r, p.k.Lock, protocol.Keyed("GET", p.k.Lock), protocol.Keyed("PTTL", p.k.Lock))
		if err != nil {
			return 0, err
		}
		if holder, _ := res[0].Text(); holder != token {
			return -3, nil
		}
		return res[1].Int64()
	})
}

// compareAndDo runs act on key in a transaction if key holds want, with
// WATCH so that a change between the read and EXEC aborts it (and it is
// tried again). If atLeast is set and the key's PTTL (read under the same
// WATCH) is at least that, act is not needed: the key is still want's and
// compareAndDo reports true. Otherwise it reports whether act ran.
func compareAndDo(ctx context.Context, r driver.Driver, key, want string, atLeast time.Duration, act driver.Command) (bool, error) {
	for range 5 {
		done, aborted := false, false
		err := r.Dedicated(ctx, key, func(conn driver.Conn) error {
			read := []driver.Command{protocol.Keyed("WATCH", key), protocol.Keyed("GET", key)}
			if atLeast > 0 {
				read = append(read, protocol.Keyed("PTTL", key))
			}
			rs := conn.Pipeline(ctx, read)
			if err := FirstErr(rs); err != nil {
				conn.Pipeline(ctx, []driver.Command{protocol.Cmd("UNWATCH")})
				return err
			}
			if v, _ := rs[1].Text(); v != want {
				conn.Pipeline(ctx, []driver.Command{protocol.Cmd("UNWATCH")})
				return nil
			}
			if atLeast > 0 {
				if left, err := rs[2].Int64(); err == nil && left >= atLeast.Milliseconds() {
					done = true
					conn.Pipeline(ctx, []driver.Command{protocol.Cmd("UNWATCH")})
					return nil
				}
			}
			res, err := exec(ctx, conn, []driver.Command{act})
			if err == nil && res == nil {
				aborted = true
				return nil
			}
			if err == nil {
				err = res[0].Err
			}
			done = err == nil
			return err
		})
		if transport.GaveUp(err) {
			return false, err // done is not ours to read: fn may still run
		}
		if !aborted {
			return done, err
		}
	}
	return false, fmt.Errorf("dlock: %q kept changing during compare-and-set", key)
}

// Ordered: without scripts the server keeps no hold sequence.
func (plainProto) Ordered() bool { return false }

func (p plainProto) Free(token string, _ int64, _ time.Duration) Op { return p.Release(token, 0, 0) }

// NewPlain is the script-free deployment on rdb; publish is the command
// its releases publish with (PUBLISH, or SPUBLISH on a cluster).
func NewPlain(rdb driver.Driver, publish string) Backend { return &plain{rdb: rdb, publish: publish} }

// PlainOps is the hold protocol of a Mutex held on be without scripts
// (be made by NewPlain; with another, or nil, its releases publish
// nothing): a ForceUnlock releases for the holder with it.
func PlainOps(be Backend, k *protocol.Keys) HoldOps {
	b, _ := be.(*plain)
	return plainProto{k, b}
}
