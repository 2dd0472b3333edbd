// Package redisfence makes Redis check the fence of every write to a
// resource: a holder whose lock was lost while it was paused, and whose
// resource has since accepted a newer owner's write, is refused with
// fence.ErrStale instead of overwriting it.
//
// A Guard keeps, per resource, the highest fence it has accepted, in a key
// of its own: "<prefix>:{<resource>}" (prefix "dlock:fenced" unless
// WithPrefix; '{', '}' and '%' in the resource are escaped as %7B, %7D and
// %25). Each write checks and records the fence in the same step as the
// write: a script for Set, Delete and HSet; a WATCH transaction for Tx,
// which runs any commands under the check. An equal fence is accepted (one
// holder writes many times); a lower one writes nothing.
//
// A write sent twice answers as it ran once. Set, Delete and HSet carry a
// write id (random, one per call) and leave a receipt of it in
// "<record>:w" for a while (WithReceiptTTL): a copy of the call that a
// client library sends again — go-redis re-sends a command whose reply
// is later than its ReadTimeout, or whose connection broke after it was
// sent — finds the receipt and answers as the first copy did, writing
// nothing, even when a newer owner wrote between the two (the copy alone
// would be refused: the holder would be told ErrStale for a write that is
// in the store). A copy that arrives after its receipt expired is checked
// as a new write. Tx is not sent twice: a transaction's WATCH lives on its
// connection, and go-redis does not run an EXEC again on another; a Tx
// whose reply is lost returns the network's error, its outcome unknown.
//
// On a Redis Cluster the record and the keys of one write must share a
// slot: put the resource's hash tag in them ("{orders/42}:total" for the
// resource "orders/42"), as the record has it. A key of another slot is
// refused before anything is sent (an error matching fence.ErrInvalid).
//
// A Guard refuses a server that may evict its records (a maxmemory-policy
// other than noeviction): every write fails with an error matching
// dlock.ErrEvictionPolicy, as a dlock Client's acquire does, unless
// WithEvictionRisk (eviction.go says why, and when the policy is read).
//
// What a Guard does not promise: writes that bypass it are not fenced;
// the record is as durable as the server's data (a restart without
// persistence forgets it, as it forgets the data); and a failover that
// loses the last writes may lose a record with them (use dlock's
// WithReplicaSync, and WAIT, if that matters).
package redisfence

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/keyslot"
	"github.com/redis/go-redis/v9"
)

// DefaultPrefix is the prefix of the records' keys.
const DefaultPrefix = "dlock:fenced"

// Guard checks the fences of writes to resources kept in one Redis
// deployment. It is safe for concurrent use.
type Guard struct {
	rdb          redis.UniversalClient
	prefix       string
	receipt      time.Duration
	cluster      bool
	evictionRisk bool          // WithEvictionRisk
	log          *slog.Logger  // WithLogger
	recheck      time.Duration // WithPolicyRecheck
	policy       *policyCheck  // the server's eviction policy (eviction.go)
}

// Option configures a Guard.
type Option func(*Guard)

// WithPrefix sets the prefix of the records' keys (default DefaultPrefix).
// It must not contain '{' or '}'.
func WithPrefix(prefix string) Option { return func(g *Guard) { g.prefix = prefix } }

// DefaultReceiptTTL is how long a write's receipt is kept unless
// WithReceiptTTL: longer than go-redis's default retries of one command
// take (4 tries of a 3 s ReadTimeout and WriteTimeout).
const DefaultReceiptTTL = time.Minute

// WithReceiptTTL sets how long a write's receipt is kept (default
// DefaultReceiptTTL; at least 1 ms): a copy of the write that reaches the
// server within it answers as the first copy did. Make it longer than
// the client library's retries of one command take. A call whose ctx has
// a later deadline keeps its receipt until that deadline. Receipts cost
// one sorted-set member per write for that long.
func WithReceiptTTL(d time.Duration) Option { return func(g *Guard) { g.receipt = d } }

// New returns a Guard of rdb's resources. Its methods return an error
// matching fence.ErrInvalid if rdb is nil or an option is invalid.
func New(rdb redis.UniversalClient, opts ...Option) *Guard {
	g := &Guard{rdb: rdb, prefix: DefaultPrefix, receipt: DefaultReceiptTTL, log: slog.Default(), recheck: DefaultPolicyRecheck}
	for _, o := range opts {
		if o != nil {
			o(g)
		}
	}
	_, g.cluster = rdb.(*redis.ClusterClient)
	g.policy = policyCheckOf(rdb, g.evictionRisk)
	return g
}

//go:embed guard.lua
var guardSrc string

var guardScript = redis.NewScript(guardSrc)

// Set writes key = value (ttl 0: no expiry) only if t's fence is at least
// every fence accepted for resource, atomically, and records it; else an
// error matching fence.ErrStale, and nothing is written. On a server that
// may evict keys it writes nothing and returns an error matching
// dlock.ErrEvictionPolicy (unless WithEvictionRisk), as every write does.
func (g *Guard) Set(ctx context.Context, t fence.Token, resource, key, value string, ttl time.Duration) error {
	if ttl < 0 {
		return invalid("negative ttl %v", ttl)
	}
	ms := ttl.Milliseconds()
	if ttl > 0 && ms == 0 {
		ms = 1
	}
	return g.run(ctx, t, resource, []string{key}, "set", value, ms)
}

// Delete deletes keys under the same check as Set.
func (g *Guard) Delete(ctx context.Context, t fence.Token, resource string, keys ...string) error {
	if len(keys) == 0 {
		return invalid("no key to delete")
	}
	return g.run(ctx, t, resource, keys, "del")
}

// HSet sets fields of the hash at key (field, value, field, value, ...)
// under the same check as Set.
func (g *Guard) HSet(ctx context.Context, t fence.Token, resource, key string, fieldValues ...string) error {
	if len(fieldValues) == 0 || len(fieldValues)%2 != 0 {
		return invalid("HSet wants field, value pairs; got %d strings", len(fieldValues))
	}
	args := make([]any, len(fieldValues))
	for i, v := range fieldValues {
		args[i] = v
	}
	return g.run(ctx, t, resource, []string{key}, "hset", args...)
}

// Tx runs fn's commands in one MULTI/EXEC transaction that commits only
// if t's fence is at least every fence accepted for resource, and records
// it (WATCH on the record and on keys, which fn may read through the
// *redis.Tx before it queues its writes on the pipeliner). A transaction
// that another client's write to a watched key interrupts is tried again,
// within ctx. It returns an error matching fence.ErrStale when the fence
// is too low (fn's commands are not run), fn's own error as it is (nothing
// is written), or Redis's.
func (g *Guard) Tx(ctx context.Context, t fence.Token, resource string, keys []string,
	fn func(tx *redis.Tx, pipe redis.Pipeliner) error) error {
	f, rec, err := g.check(t, resource, keys)
	if err != nil {
		return err
	}
	if fn == nil {
		return invalid("nil transaction")
	}
	if err := g.admit(ctx); err != nil {
		return err
	}
	watched := append([]string{rec}, keys...)
	for {
		err := g.rdb.Watch(ctx, func(tx *redis.Tx) error {
			highest, err := tx.Get(ctx, rec).Int64()
			if err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
			if f < highest {
				return stale(resource, f, highest)
			}
			_, err = tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
				if f > highest {
					pipe.Set(ctx, rec, f, 0)
				}
				return fn(tx, pipe)
			})
			return err
		}, watched...)
		if !errors.Is(err, redis.TxFailedErr) {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// Fence returns the highest fence accepted for resource (0: none yet).
func (g *Guard) Fence(ctx context.Context, resource string) (int64, error) {
	if g.rdb == nil {
		return 0, invalid("nil Redis client")
	}
	if resource == "" {
		return 0, invalid("empty resource")
	}
	f, err := g.rdb.Get(ctx, g.Record(resource)).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("redisfence: fence of %q: %w", resource, err)
	}
	return f, nil
}

// Record is the key of resource's record: the highest fence accepted.
func (g *Guard) Record(resource string) string {
	return g.prefix + ":{" + tagEscaper.Replace(resource) + "}"
}

// receipts is the key of resource's receipts: the ids of its recent
// writes (guard.lua), in the record's slot.
func (g *Guard) receipts(resource string) string { return g.Record(resource) + ":w" }

var tagEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// infoField returns the value of a field of an INFO reply ("" if absent).
func infoField(info, field string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// check validates a write and returns its fence and the record's key.
func (g *Guard) check(t fence.Token, resource string, keys []string) (int64, string, error) {
	if g.rdb == nil {
		return 0, "", invalid("nil Redis client")
	}
	if g.prefix == "" || strings.ContainsAny(g.prefix, "{}") {
		return 0, "", invalid("prefix %q: must be non-empty, without '{' or '}'", g.prefix)
	}
	if g.receipt <= 0 {
		return 0, "", invalid("receipt TTL %v: must be positive", g.receipt)
	}
	if g.recheck <= 0 {
		return 0, "", invalid("policy recheck %v: must be positive", g.recheck)
	}
	if g.log == nil {
		return 0, "", invalid("nil logger")
	}
	f, err := fence.Check(t, resource)
	if err != nil {
		return 0, "", err
	}
	rec := g.Record(resource)
	for _, k := range keys {
		if k == "" {
			return 0, "", invalid("empty key")
		}
		if g.cluster && keyslot.Of(k) != keyslot.Of(rec) {
			return 0, "", invalid("key %q is not in the slot of resource %q's record %q: on a Redis Cluster put {%s} in it",
				k, resource, rec, tagEscaper.Replace(resource))
		}
	}
	return f, rec, nil
}

// run runs guard.lua.
func (g *Guard) run(ctx context.Context, t fence.Token, resource string, keys []string, op string, args ...any) error {
	f, rec, err := g.check(t, resource, keys)
	if err != nil {
		return err
	}
	if err := g.admit(ctx); err != nil {
		return err
	}
	// The write id, made once, before the first send: every copy of this
	// call carries it (guard.lua's receipt).
	var id [12]byte
	_, _ = rand.Read(id[:])
	keep := g.receipt
	if dl, ok := ctx.Deadline(); ok {
		keep = max(keep, time.Until(dl))
	}
	argv := append([]any{strconv.FormatInt(f, 10), hex.EncodeToString(id[:]), max(keep.Milliseconds(), 1), op}, args...)
	res, err := guardScript.Run(ctx, g.rdb, append([]string{rec, g.receipts(resource)}, keys...), argv...).Slice()
	if err != nil {
		return fmt.Errorf("redisfence: %s %q: %w", op, resource, err)
	}
	if len(res) == 2 {
		if ok, _ := res[0].(int64); ok == 1 {
			return nil
		}
		highest, _ := strconv.ParseInt(fmt.Sprint(res[1]), 10, 64)
		return stale(resource, f, highest)
	}
	return fmt.Errorf("redisfence: %s %q: unexpected reply %v", op, resource, res)
}

// stale is the error of a write whose fence is below the record's.
func stale(resource string, f, highest int64) error {
	return fmt.Errorf("%w: %q accepted fence %d, this write carries %d", fence.ErrStale, resource, highest, f)
}

// invalid is an error matching fence.ErrInvalid.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: redisfence: %s", fence.ErrInvalid, fmt.Sprintf(format, args...))
}
