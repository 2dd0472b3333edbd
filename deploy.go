package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/dlock-go/dlock/internal/protocol"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/telemetry"
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
//     and its waits poll (poller) instead of sleeping until the next renewal
//     of their place.
//   - A server that evicts keys (any maxmemory-policy but noeviction; the
//     volatile-* policies too, since a lock key carries a TTL). An evicted
//     lock is free for a second holder, and an evicted fence counter starts
//     again at 1. The first acquire reads maxmemory_policy from INFO memory
//     on every node (every master of a cluster) and fails with
//     ErrEvictionPolicy unless WithEvictionRisk was given.

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

// wakeNone is the payload of the probe that a Client publishes on its
// wake-up channel: a member whose token ("-") no waiter has, so that a
// listener of a shared channel (a script-free mutex's) wakes nobody.
const wakeNone = "check:-"

// deployment is what a Client has learnt of its deployment: whether the
// first acquire's check passed, and whether pub/sub is refused. It is
// shared with the Redis wrappers that report refusals from scripts.
type deployment struct {
	prefix       string
	publish      string
	evictionRisk bool
	tel          *telemetry.Telemetry

	checked atomic.Bool // the eviction check passed (or could not be told, and was let be)
	probed  atomic.Bool // the pub/sub probe was answered
	probing atomic.Bool // a probe is under way

	wmu    sync.Mutex
	warned map[string]bool

	refused atomic.Pointer[error] // pub/sub refused: the error Health returns
}

// checkDeployment checks, at a Client's first acquire, that no node may
// evict lock keys. Once it has passed it costs an atomic load; a check
// that could not be made, or that refused the server, is made again by
// the next call, so a server fixed meanwhile is accepted without a new
// Client. A quorum checks the nodes it can reach (a node that is down is
// the quorum's business, and is checked at a later call); a single
// deployment returns the error of a check it could not make. Then, once,
// it folds the fence counters of other layouts into the Client's
// (fold.go), with the same rule for errors.
func (c *Client) checkDeployment(ctx context.Context) error {
	if !c.dep.checked.Load() {
		if err := c.checkEvictions(ctx); err != nil {
			return err
		}
	}
	if err := c.foldFences(ctx); err != nil && len(c.nodes) == 1 {
		return err
	}
	return nil
}

// checkEvictions is checkDeployment's check of the eviction policies.
func (c *Client) checkEvictions(ctx context.Context) error {
	d := c.dep
	// Calls made while the first check is under way check too, each
	// within its own ctx (a lock held across the check would make a short
	// ctx wait for a long one).
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Go(func() {
			nctx := ctx
			if q, ok := c.be.(*quorum); ok {
				// a stopped node must not hold the acquire up for its
				// whole ctx: it is checked at a later call
				var cancel context.CancelFunc
				nctx, cancel = context.WithTimeout(ctx, q.timeout)
				defer cancel()
			}
			errs[i] = d.checkEviction(nctx, n)
		})
	}
	wg.Wait()
	unread := false
	for _, err := range errs {
		if errors.Is(err, ErrEvictionPolicy) {
			return err
		}
		unread = unread || err != nil
	}
	if unread && len(c.nodes) == 1 {
		return errs[0]
	}
	if !unread {
		d.checked.Store(true)
	}
	return nil
}

// checkEviction reads one node's eviction policy (every master's on a
// cluster). It returns an error matching ErrEvictionPolicy for a policy
// that may evict keys, unless WithEvictionRisk was given, and a wrapped
// Redis error when it could not ask.
func (d *deployment) checkEviction(ctx context.Context, r driver.Driver) error {
	nodes, err := r.Masters(ctx)
	if err != nil {
		return checkErr("INFO memory", err)
	}
	infos := make([]driver.Reply, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { infos[i] = n.Do(ctx, protocol.Cmd("INFO", "memory")) })
	}
	wg.Wait()
	for _, i := range infos {
		info, err := i.Text()
		if err := d.checkPolicy(info, err); err != nil {
			return err
		}
	}
	return nil
}

// checkPolicy checks one INFO memory reply.
func (d *deployment) checkPolicy(info string, err error) error {
	if isReply(err) {
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
		"issues fences again; set maxmemory-policy noeviction (or accept the risk with WithEvictionRisk)", ErrEvictionPolicy, policy)
}

// checkErr is the error of a check that could not be made.
func checkErr(what string, err error) error {
	return fmt.Errorf("dlock: checking the server (%s): %w", what, err)
}

// probePubSub finds out, at a Client's first wait, whether its ACL user
// may use the channel it is about to subscribe to (a refused SUBSCRIBE
// cannot be seen: see the top of this file): it publishes wakeNone on it,
// on every node, once. Nobody else listens on a Client's own channel, and
// on a lock's channel (WithoutScripts) the message wakes nobody. A probe
// that does not get an answer is made again at the next wait; the wait
// goes on either way.
func (c *Client) probePubSub(ctx context.Context, channel string) {
	d := c.dep
	// One probe at a time; a wait that finds one under way does not wait
	// for it.
	if d.probed.Load() || !d.probing.CompareAndSwap(false, true) {
		return
	}
	defer d.probing.Store(false)
	answered := make([]bool, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Go(func() {
			err := n.Do(ctx, protocol.Cmd(d.publish, channel, wakeNone)).Err
			if isReply(err) {
				d.pubsubRefused(d.publish+" "+channel, err)
			}
			answered[i] = err == nil || isReply(err)
		})
	}
	wg.Wait()
	if !slices.Contains(answered, false) {
		d.probed.Store(true)
	}
}

// isReply reports whether err is an error reply from the server (a
// refusal), not a failure to reach it.
func isReply(err error) bool {
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
func (d *deployment) pubsubRefused(what string, cause error) {
	err := fmt.Errorf("%w: %s: %w; grant the Client's ACL user the channels &%s:* (until then waits poll)",
		ErrPubSubRefused, what, cause, d.prefix)
	if d.refused.CompareAndSwap(nil, &err) {
		d.tel.Log.Warn("dlock: pub/sub refused; waits poll instead of being woken", "err", err)
	}
}

// PublishRefused records that the server refused a script's publish
// (err): the driver stack read it in the script's reply
// (transport.Reports).
func (d *deployment) PublishRefused(err error) { d.pubsubRefused("a script's "+d.publish, err) }

// CommandRefused logs once, per refusal, that the Client's ACL user may
// not run a command dlock sends (err from the reply to cmd; the driver
// stack tells it of every reply: transport.Reports): the caller
// gets the error, but some calls that meet one go on in the background
// (the bury of a given-up wait, an undo, a renewal), where it would be
// silent. A refused PUBLISH is pubsubRefused's; a key or a channel
// refused is not a command refused (a user limited to some locks meets
// those by design).
func (d *deployment) CommandRefused(cmd driver.Command, err error) {
	if err == nil || !isReply(err) {
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

// warnOnce logs a warning the first time it is given for key.
func (d *deployment) warnOnce(key, msg string, args ...any) {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	if d.warned[key] {
		return
	}
	d.warned[key] = true
	d.tel.Log.Warn(msg, args...)
}

// Health returns nil, or an error saying what the deployment refuses that
// the Client works around at a cost. It is an error matching
// ErrPubSubRefused once the Client found that its ACL user may not publish
// on its channels (the check of the first Lock or TryLock, or a release
// whose wake-up was refused): locks stay correct, but releases wake
// nobody, so every wait polls (from 16 ms, doubling, up to 256 ms) and
// costs that much more. The Client also logs it once (WithLogger). Health
// does no I/O and does not block.
func (c *Client) Health() error {
	if err := c.dep.refused.Load(); err != nil {
		return *err
	}
	return nil
}
