// Package deploy is what a dlock Client learns and keeps about its
// deployment: the checks of its first acquire and first wait (the
// server's version, version.go; the eviction policy; pub/sub ACLs), the
// refusals the driver stack reports (transport.Reports), the fold of
// older fence counters into the Client's (fold.go), and the owner record
// a Client writes about itself (owner.go). It names no Client: the root
// gives it what it needs as plain values and funcs (Config, then Reach).
package deploy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/telemetry"
	"github.com/dlock-go/dlock/internal/transport"
)

// What a deployment must give dlock, and what a Client does when it does
// not. Two misconfigurations break locks without an error of their own:
//
//   - An ACL user without pub/sub channels (Redis 7 grants none to a new
//     user). Every PUBLISH of a release is refused, after the script has
//     written: the lock is handed on all the same, since Redis does not roll
//     a script back. Every SUBSCRIBE is refused too, and go-redis drops that
//     error in its receive loop (PubSub.Subscribe only sends the command;
//     ChannelWithSubscriptions's goroutine swallows the error reply), so the
//     hub cannot see it. Scripts therefore publish through pcall and report a
//     refusal in their reply (scripts/lib.lua; the reporter of internal/transport), and a Client
//     probes its wake-up channel with one PUBLISH at its first wait. Once
//     either has seen a refusal, the Client warns once, Health reports it,
//     and its waits poll (the root's poller) instead of sleeping until the next renewal
//     of their place.
//   - A server that evicts keys (any maxmemory-policy but noeviction; the
//     volatile-* policies too, since a lock key carries a TTL). An evicted
//     lock is free for a second holder, and an evicted fence counter starts
//     again at 1. The first acquire reads maxmemory_policy from INFO memory
//     on every node (every master of a cluster) and fails with
//     ErrEvictionPolicy unless WithEvictionRisk was given.
//
// The same first acquire reads each node's version from INFO server (in
// the same round trip as INFO memory), once per node, and fails with
// ErrUnsupportedServer for a server older than the oldest supported
// (version.go): before it writes anything, rather than a script failing
// halfway, or, on a Redis 6 cluster, every wake-up being lost. New cannot
// do it: it takes no ctx and sends nothing (a service may start before
// its Redis does).

// wakeNone is the payload of the probe that a Client publishes on its
// wake-up channel: a member whose token ("-") no waiter has, so that a
// listener of a shared channel (a script-free mutex's) wakes nobody.
const wakeNone = "check:-"

// Config is what a Deployment knows from the Client's options, before the
// driver stack is built (the stack reports to the Deployment).
type Config struct {
	// Prefix is the Client's key prefix.
	Prefix string
	// Publish is how releases are published: PUBLISH or SPUBLISH.
	Publish string
	// EvictionRisk lets the Client run on a server that may evict keys
	// (WithEvictionRisk).
	EvictionRisk bool
	// NoOwner: the Client writes no owner record (WithoutOwnerInfo, or
	// WithoutScripts: the record is a script call on every node, which the
	// script-free backend cannot run).
	NoOwner bool
	// Label is the free label of the owner record (WithOwnerLabel).
	Label string
	// Tel is where warnings are logged.
	Tel *telemetry.Telemetry
}

// Reach is how a Deployment reaches Redis and runs in the background,
// given once the Client is built (Attach): the driver stack, which reports
// to the Deployment, comes after it.
type Reach struct {
	// Nodes are the Redis nodes, through the driver stack: one but for a
	// quorum.
	Nodes []driver.Driver
	// NodeTimeout bounds a check or a fold's first read of one node: a
	// quorum's node timeout (a stopped node must not hold an acquire up),
	// 0 otherwise (the caller's ctx alone).
	NodeTimeout time.Duration
	// Fence is the fence counter every lock shares, or "" for one per
	// cluster slot (protocol.FenceKey).
	Fence string
	// ID is the Client's id, which names its owner record.
	ID string
	// Everywhere runs a script call on every node (the backend's): the
	// owner record's.
	Everywhere func(ctx context.Context, call protocol.Call) error
	// Folds, on a quorum, is where the fold records its outcome on each
	// node: the quorum's fences count only the nodes folded (nil off a
	// quorum).
	Folds *transport.Folds
	// Life ends when the Client closes; the fold runs under it.
	Life context.Context
	// Background runs f as the Client's background work (waited for by
	// Close), or returns false once the Client is closed.
	Background func(f func()) bool
}

// Deployment is what a Client has learnt of its deployment: whether the
// first acquire's check passed, whether the fence counters were folded,
// whether pub/sub is refused, and its own owner record. It is shared with
// the driver stack, which reports refusals from scripts
// (transport.Reports).
type Deployment struct {
	prefix       string
	publish      string
	evictionRisk bool
	tel          *telemetry.Telemetry
	reach        Reach // set by Attach

	checked atomic.Bool // the eviction check passed (or could not be told, and was let be)
	// versioned[i]: node i's servers (every master of a cluster) are of a
	// supported version (or could not be told, and were let be). Read
	// once per node: a quorum's node that was down is read at a later
	// call, the others are not read again.
	versioned []atomic.Bool
	probed    atomic.Bool // the pub/sub probe was answered
	probing   atomic.Bool // a probe is under way

	wmu    sync.Mutex
	warned map[string]bool

	refused atomic.Pointer[error] // pub/sub refused: the error Health returns

	// folded: the fence counters of other layouts are folded into this
	// Client's; folding: the fold under way, if any (fold.go).
	folded  atomic.Bool
	foldMu  sync.Mutex
	folding *foldRun

	owner *owners // what the Client records of itself for inspectors (owner.go)
}

var _ transport.Reports = (*Deployment)(nil)

// New returns what a Client will learn of its deployment, reported
// through cfg.Tel: built before the driver stack, which reports to it.
// Attach must be called before Check, ProbePubSub, Announce or Forget.
func New(cfg Config) *Deployment {
	return &Deployment{prefix: cfg.Prefix, publish: cfg.Publish, evictionRisk: cfg.EvictionRisk,
		tel: cfg.Tel, warned: map[string]bool{}, owner: newOwners(cfg)}
}

// Attach gives d the Client's nodes and background (see Reach), once the
// Client is built and before it is used.
func (d *Deployment) Attach(r Reach) {
	d.reach = r
	d.versioned = make([]atomic.Bool, len(r.Nodes))
}

// Check checks, at a Client's first acquire, that every node is of a
// supported version and that none may evict lock keys. Once it has
// passed it costs an atomic load; a check that could not be made, or
// that refused the server, is made again by the next call, so a server
// fixed meanwhile is accepted without a new Client. A quorum checks the
// nodes it can reach (a node that is down is the quorum's business, and
// is checked at a later call); a single deployment returns the error of a
// check it could not make. Then, once, it folds the fence counters of
// other layouts into the Client's (fold.go), with the same rule for
// errors: a quorum's round then issues no fence unless
// a majority of the nodes it counts are folded (Reach.Folds).
func (d *Deployment) Check(ctx context.Context) error {
	if !d.checked.Load() {
		if err := d.checkEvictions(ctx); err != nil {
			return err
		}
	}
	if err := d.foldFences(ctx); err != nil && len(d.reach.Nodes) == 1 {
		return err
	}
	return nil
}

// nodeCtx is ctx bounded by the node timeout, if any.
func (d *Deployment) nodeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if d.reach.NodeTimeout > 0 {
		return context.WithTimeout(ctx, d.reach.NodeTimeout)
	}
	return ctx, func() {}
}

// checkEvictions is Check's check of the eviction policies and versions.
func (d *Deployment) checkEvictions(ctx context.Context) error {
	// Calls made while the first check is under way check too, each
	// within its own ctx (a lock held across the check would make a short
	// ctx wait for a long one).
	failed := make([]error, len(d.reach.Nodes))
	var wg sync.WaitGroup
	for i, n := range d.reach.Nodes {
		wg.Go(func() {
			// a stopped quorum node must not hold the acquire up for
			// its whole ctx: it is checked at a later call
			nctx, cancel := d.nodeCtx(ctx)
			defer cancel()
			failed[i] = d.checkEviction(nctx, i, n)
		})
	}
	wg.Wait()
	unread := false
	for _, err := range failed {
		if errors.Is(err, errs.EvictionPolicy) || errors.Is(err, errs.UnsupportedServer) {
			return err
		}
		unread = unread || err != nil
	}
	if unread && len(d.reach.Nodes) == 1 {
		return failed[0]
	}
	if !unread {
		d.checked.Store(true)
	}
	return nil
}

// checkEviction reads node i's eviction policy (every master's on a
// cluster), and its version until it has been read once. It returns an
// error matching ErrUnsupportedServer for a server too old, one matching
// ErrEvictionPolicy for a policy that may evict keys, unless
// WithEvictionRisk was given, and a wrapped Redis error when it could not
// ask.
func (d *Deployment) checkEviction(ctx context.Context, i int, r driver.Driver) error {
	nodes, err := r.Masters(ctx)
	if err != nil {
		return checkErr("INFO memory", err)
	}
	version := !d.versioned[i].Load()
	cmds := []driver.Command{protocol.Cmd("INFO", "memory")}
	if version {
		// before 7.0, INFO takes one section: two commands, one round trip
		cmds = append(cmds, protocol.Cmd("INFO", "server"))
	}
	infos := make([][]driver.Reply, len(nodes))
	var wg sync.WaitGroup
	for j, n := range nodes {
		wg.Go(func() { infos[j] = n.Pipeline(ctx, cmds) })
	}
	wg.Wait()
	if version {
		for _, rs := range infos {
			info, err := rs[1].Text()
			if err := d.checkVersion(info, err); err != nil {
				return err
			}
		}
		d.versioned[i].Store(true)
	}
	for _, rs := range infos {
		info, err := rs[0].Text()
		if err := d.checkPolicy(info, err); err != nil {
			return err
		}
	}
	return nil
}

// checkVersion checks one INFO server reply: nil for a supported server,
// or one that cannot be told (INFO refused, a version dlock cannot read:
// let be, said once), an error matching ErrUnsupportedServer for one too
// old, a wrapped Redis error when it could not ask.
func (d *Deployment) checkVersion(info string, err error) error {
	if IsReply(err) {
		d.warnOnce("version", "dlock: cannot read the server's version; make sure it is "+Oldest()+" or later, or a Valkey",
			"err", err)
		return nil
	} else if err != nil {
		return checkErr("INFO server", err)
	}
	s, ok := ServerOf(info)
	if !ok {
		d.warnOnce("version", "dlock: cannot read the server's version; make sure it is "+Oldest()+" or later, or a Valkey",
			"version", s.Text)
		return nil
	}
	return Supports(s, d.publish)
}

// checkPolicy checks one INFO memory reply.
func (d *Deployment) checkPolicy(info string, err error) error {
	if IsReply(err) {
		// A proxy or an ACL that refuses INFO: the policy cannot be told.
		d.warnOnce("info", "dlock: cannot read the server's maxmemory-policy; make sure it is noeviction, or a lock key may be evicted while held",
			"err", err)
		return nil
	} else if err != nil {
		return checkErr("INFO memory", err)
	}
	policy := infoField(info, "maxmemory_policy")
	if policy == "" || policy == "noeviction" {
		return nil
	}
	if d.evictionRisk {
		d.warnOnce("eviction", "dlock: the server may evict lock keys (WithEvictionRisk): a lock can be taken twice and a fence issued twice",
			"maxmemory_policy", policy)
		return nil
	}
	return fmt.Errorf("%w: maxmemory-policy is %s: an evicted lock key lets a second owner in, an evicted fence counter "+
		"issues fences again; set maxmemory-policy noeviction (or accept the risk with WithEvictionRisk)", errs.EvictionPolicy, policy)
}

// checkErr is the error of a check that could not be made.
func checkErr(what string, err error) error {
	return fmt.Errorf("dlock: checking the server (%s): %w", what, err)
}

// ProbePubSub finds out, at a Client's first wait, whether its ACL user
// may use the channel it is about to subscribe to (a refused SUBSCRIBE
// cannot be seen: see the top of this file): it publishes wakeNone on it,
// on every node, once. Nobody else listens on a Client's own channel, and
// on a lock's channel (WithoutScripts) the message wakes nobody. A probe
// that does not get an answer is made again at the next wait; the wait
// goes on either way.
func (d *Deployment) ProbePubSub(ctx context.Context, channel string) {
	// One probe at a time; a wait that finds one under way does not wait
	// for it.
	if d.probed.Load() || !d.probing.CompareAndSwap(false, true) {
		return
	}
	defer d.probing.Store(false)
	answered := make([]bool, len(d.reach.Nodes))
	var wg sync.WaitGroup
	for i, n := range d.reach.Nodes {
		wg.Go(func() {
			err := n.Do(ctx, protocol.Cmd(d.publish, channel, wakeNone)).Err
			if IsReply(err) {
				d.pubsubRefused(d.publish+" "+channel, err)
			}
			answered[i] = err == nil || IsReply(err)
		})
	}
	wg.Wait()
	if !slices.Contains(answered, false) {
		d.probed.Store(true)
	}
}

// IsReply reports whether err is an error reply from the server (a
// refusal), not a failure to reach it.
func IsReply(err error) bool {
	_, ok := errors.AsType[*driver.ErrorReply](err)
	return ok
}

// infoField returns the value of a field of an INFO reply ("" if absent).
func infoField(info, field string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// pubsubRefused records that the server refused a PUBLISH or SUBSCRIBE
// (what): from then on the Client's waits poll, Health reports it, and it
// is logged once.
func (d *Deployment) pubsubRefused(what string, cause error) {
	err := fmt.Errorf("%w: %s: %w; grant the Client's ACL user the channels &%s:* (until then waits poll)",
		errs.PubSubRefused, what, cause, d.prefix)
	if d.refused.CompareAndSwap(nil, &err) {
		d.tel.Log.Warn("dlock: pub/sub refused; waits poll instead of being woken", "err", err)
	}
}

// PublishRefused records that the server refused a script's publish
// (err): the driver stack read it in the script's reply
// (transport.Reports).
func (d *Deployment) PublishRefused(err error) { d.pubsubRefused("a script's "+d.publish, err) }

// CommandRefused logs once, per refusal, that the Client's ACL user may
// not run a command dlock sends (err from the reply to cmd; the driver
// stack tells it of every reply: transport.Reports): the caller
// gets the error, but some calls that meet one go on in the background
// (the bury of a given-up wait, an undo, a renewal), where it would be
// silent. A refused PUBLISH is pubsubRefused's; a key or a channel
// refused is not a command refused (a user limited to some locks meets
// those by design).
func (d *Deployment) CommandRefused(cmd driver.Command, err error) {
	if err == nil || !IsReply(err) {
		return
	}
	msg := err.Error()
	if !strings.Contains(msg, "permissions to run the") && !strings.Contains(msg, "can't run this command") {
		return
	}
	if len(cmd.Args) > 0 {
		if name, _ := cmd.Args[0].(string); strings.EqualFold(name, "PUBLISH") || strings.EqualFold(name, "SPUBLISH") {
			return
		}
	}
	d.warnOnce("refused: "+msg, "dlock: the ACL user may not run a command dlock sends; grant what docs/deployments.md "+
		"prints (dlock check names what is missing)", "prefix", d.prefix, "err", err)
}

// WarnOnce logs a warning the first time it is given for key.
func (d *Deployment) WarnOnce(key, msg string, args ...any) { d.warnOnce(key, msg, args...) }

// warnOnce logs a warning the first time it is given for key.
func (d *Deployment) warnOnce(key, msg string, args ...any) {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	if d.warned[key] {
		return
	}
	d.warned[key] = true
	d.tel.Log.Warn(msg, args...)
}

// Refused returns nil, or the error matching ErrPubSubRefused once the
// Client found that its ACL user may not publish on its channels (the
// probe of its first wait, or a script's refused publish): Client.Health
// returns it, and waits poll while it is not nil. It does no I/O and does
// not block.
func (d *Deployment) Refused() error {
	if err := d.refused.Load(); err != nil {
		return *err
	}
	return nil
}
