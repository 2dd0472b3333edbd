package backend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/transport"

	"github.com/dlock-go/dlock/driver"
)

// Quorum is the RedLock backend of a Client made by dlock.NewQuorum: N
// independent masters, of which a majority must agree. It runs a Mutex
// (the root's protocol of one, sent to every node), with re-entry.
type Quorum struct {
	nodes           []driver.Driver
	timeout, jitter time.Duration // per node and call; most random delay between contended rounds
	mark            string        // the key of each node's mark (see "Fences on a quorum")
	drift           Drift
	log             *slog.Logger
	fail            func(QuorumFailure) error
	folds           *transport.Folds // which nodes' older fence counters are folded (see "Fences on a quorum")
	// stragglers are node calls still running after their operation was
	// decided by a majority; Close waits for them.
	stragglers sync.WaitGroup
}

// QuorumConfig is what a Quorum is made of: dlock.NewQuorum fills it in,
// defaults and checks included.
type QuorumConfig struct {
	Nodes   []driver.Driver
	Timeout time.Duration // per node and call
	Jitter  time.Duration // most random delay between contended rounds
	Mark    string        // the key of each node's mark (see "Fences on a quorum")
	Drift   Drift
	Log     *slog.Logger
	// Fail makes the error of a quorum call that no majority decided
	// (dlock's *QuorumError): every such error the quorum returns or
	// puts in a reply is Fail's.
	Fail func(QuorumFailure) error
}

// QuorumFailure is a quorum call that no majority decided, as data: the
// fields of dlock.QuorumError, whose doc says what they mean.
type QuorumFailure struct {
	Op      string // "lock", "unlock", "renew", "ttl", "fence"
	Name    string
	OK      int // nodes that did what was asked
	Needed  int // the majority
	Failing []NodeFailure
	NotSeen []int // Op "fence": the nodes not yet known to hold every fence issued
	// Unfolded (Op "fence"): the nodes whose older fence counters are
	// not yet folded into the Client's, each with why (the fold's error,
	// or transport.ErrNotFolded while none ended there).
	Unfolded []NodeFailure
}

// NodeFailure is one node's failure in a quorum call (dlock.NodeError).
type NodeFailure struct {
	Node int // index in Nodes
	Err  error
}

// NewQuorum returns the quorum backend of cfg.
func NewQuorum(cfg QuorumConfig) *Quorum {
	return &Quorum{nodes: cfg.Nodes, timeout: cfg.Timeout, jitter: cfg.Jitter, mark: cfg.Mark, drift: cfg.Drift,
		log: cfg.Log, fail: cfg.Fail, folds: transport.NewFolds(len(cfg.Nodes))}
}

// Folds is where the deployment records the fold on each node (see
// "Fences on a quorum").
func (q *Quorum) Folds() *transport.Folds { return q.folds }

// NodeTimeout is how long each node's part of a quorum call may take.
func (q *Quorum) NodeTimeout() time.Duration { return q.timeout }

// majority is how many nodes make a quorum.
func (q *Quorum) majority() int { return len(q.nodes)/2 + 1 }

// fanout runs the call made by mk for each node on all nodes at once, each
// bounded by the node timeout, and returns every node's reply.
func (q *Quorum) fanout(ctx context.Context, nodes []int, mk func(node int) protocol.Call) []driver.Reply {
	out := make([]driver.Reply, len(q.nodes))
	var wg sync.WaitGroup
	for _, i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nctx, cancel := context.WithTimeout(ctx, q.timeout)
			defer cancel()
			out[i] = mk(i).Run(nctx, q.nodes[i])
		}()
	}
	wg.Wait()
	return out
}

// all lists every node.
func (q *Quorum) all() []int {
	idx := make([]int, len(q.nodes))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// tally sorts a fan-out's replies: ok nodes, nodes that answered "no", and
// failed nodes.
type tally struct {
	ok, no []int
	failed []NodeFailure
	vals   map[int][]int64 // the replies of ok and no nodes
	twice  bool            // a node's call was sent twice (driver.Reply.SentTwice)
}

func (q *Quorum) tally(cmds []driver.Reply, nodes []int, isOK func([]int64) bool) tally {
	t := tally{vals: map[int][]int64{}}
	for _, i := range nodes {
		t.add(i, cmds[i], isOK)
	}
	return t
}

// add counts node's reply.
func (t *tally) add(node int, cmd driver.Reply, isOK func([]int64) bool) {
	t.twice = t.twice || cmd.SentTwice
	v, err := cmd.Int64Slice()
	if err != nil {
		// Replies that are a plain integer (renew, unlock, ttl).
		if n, nerr := cmd.Int64(); nerr == nil {
			v, err = []int64{n}, nil
		}
	}
	switch {
	case err != nil:
		t.failed = append(t.failed, NodeFailure{node, err})
	case isOK(v):
		t.vals[node] = v
		t.ok = append(t.ok, node)
	default:
		t.vals[node] = v
		t.no = append(t.no, node)
	}
}

// decided reports whether the tally's outcome can no longer change.
func (q *Quorum) decided(t tally) bool {
	return len(t.ok) >= q.majority() || len(t.no) > len(q.nodes)-q.majority()
}

// outcome says what a tally means: yes (a majority did it), no (a
// majority can no longer do it), or an error (too many failed nodes; the
// nodes that had not answered, where answered is set, failing with
// errNoReplyYet).
func (q *Quorum) outcome(t tally, op, name string, answered []bool) (bool, error) {
	if len(t.ok) >= q.majority() {
		return true, nil
	}
	if len(t.no) > len(q.nodes)-q.majority() {
		return false, nil
	}
	failing := t.failed
	for i, done := range answered {
		if !done {
			failing = append(failing, NodeFailure{i, errNoReplyYet})
		}
	}
	return false, q.fail(QuorumFailure{Op: op, Name: name, OK: len(t.ok), Needed: q.majority(), Failing: failing})
}

// lock is one RedLock round for a Mutex (a: its acquire; member: its
// place in the queues, if any).
func (q *Quorum) lock(ctx context.Context, a *AttemptSpec, member string, waiting bool) (Outcome, error) {
	k, token, cfg := a.K, a.Token, a.Cfg
	start := time.Now()
	nodes := q.all()
	t := q.tally(q.fanout(ctx, nodes, func(int) protocol.Call {
		return a.Call(token, member, member != "", cfg)
	}), nodes, func(v []int64) bool { return len(v) == 2 && v[0] == protocol.ReplyHeld })
	if len(t.failed) > 0 {
		q.log.Warn("dlock: quorum nodes failed", "lock", k.Name, "failed", len(t.failed),
			"node", t.failed[0].Node, "err", t.failed[0].Err)
	}
	validity := cfg.TTL - time.Since(start) - q.drift.Of(cfg.TTL)
	var fenceErr error
	if len(t.ok) >= q.majority() && validity > 0 {
		fence, err := q.raiseFences(ctx, k, t)
		if err == nil {
			if member != "" && len(t.no) > 0 {
				// The nodes that said "held by another" kept the
				// waiter's place (a granting node's script removed it):
				// it goes, so their wake-ups are not sent to a waiter
				// that no longer waits until its QueueTTL. They hold
				// nothing of ours, so leave.lua releases nothing. A node
				// that did not answer keeps it until its QueueTTL.
				q.fanout(ctx, t.no, func(int) protocol.Call { return a.Leave(member) })
			}
			return Outcome{Granted: true, Fence: fence, Start: start, SentTwice: t.twice}, nil
		}
		fenceErr = err
	}
	// No majority, or no time left: give back what was granted, at once
	// (within ctx, or undoGrace once it has ended; else in the
	// background), and what may have been, where the reply was lost or
	// came after ctx ended, once that node's call can no longer run there.
	// Nodes that said "held by another" have nothing of ours.
	back := q.giveBack(t, func(int) protocol.Call { return call(a.Ops.Release(token, 0, 0)) },
		func(int) protocol.Call { return BuryCall(k, token, cfg) })
	if fenceErr != nil {
		// No fence can be issued that is sure to be new (see "Fences on a
		// quorum"): a TryLock fails with why; a Lock waits and tries
		// again within its ctx, as for a lock held elsewhere, and says
		// why if its ctx ends first.
		if waiting {
			return Outcome{Wait: fenceRetry + rand.N(q.jitter+1), GiveBack: back, Why: fenceErr, SentTwice: t.twice}, nil
		}
		return Outcome{GiveBack: back, SentTwice: t.twice}, fenceErr
	}
	if len(t.failed) > len(q.nodes)-q.majority() {
		return Outcome{GiveBack: back, SentTwice: t.twice}, q.fail(QuorumFailure{Op: "lock", Name: k.Name, OK: len(t.ok), Needed: q.majority(), Failing: t.failed})
	}
	var why error
	if len(t.ok) >= q.majority() {
		// A majority granted, but too late to be of use: the error of a
		// TryLock, or of a Lock whose ctx ends first, says so (not "held").
		why = fmt.Errorf("a majority granted, but the round took %v of the lease's %v (less the drift allowance): no validity left",
			time.Since(start).Round(time.Millisecond), cfg.TTL)
	}
	// Held elsewhere: wait for the soonest holder's lease to end, or a
	// release; a split vote: retry soon. Either way add jitter.
	wait := time.Duration(0)
	for _, i := range t.no {
		if v := t.vals[i]; len(v) == 2 && v[0] == protocol.ReplyBusy {
			if d := RetryAfter(v[1], cfg.TTL); wait == 0 || d < wait {
				wait = d
			}
		}
	}
	if len(t.ok) > 0 {
		wait = 0 // we won some votes: someone else did too; try again soon
	}
	return Outcome{Wait: wait + rand.N(q.jitter+1), GiveBack: back, Why: why, SentTwice: t.twice}, nil
}

// fenceRetry is how soon a Lock tries again when a majority granted but
// no fence could be issued (a node not yet seen may answer meanwhile).
const fenceRetry = 200 * time.Millisecond

// giveBack is how to undo a round that did not win: release (made by mk)
// on the nodes that granted at once (the acquire path runs it as
// hold.Keeper.Undo does), and on each node whose call failed once that call
// is settled (a node that is down must not hold up the caller), after
// burying the token there (made by bury): that node may still run the
// attempt later (stopped, it runs what it was sent when it resumes), and
// a release that comes first would leave it held by nobody; buried, the
// late attempt takes nothing. The acquire path tries a failed node's
// undo again until the node answers (hold.Keeper.UndoLater).
func (q *Quorum) giveBack(t tally, mk, bury func(node int) protocol.Call) []UndoStep {
	on := func(nodes []int) func(context.Context) error {
		return func(ctx context.Context) error { return FirstErr(q.fanout(ctx, nodes, mk)) }
	}
	var steps []UndoStep
	if len(t.ok) > 0 {
		steps = append(steps, UndoStep{Undo: on(t.ok)})
	}
	for _, f := range t.failed {
		node := []int{f.Node}
		steps = append(steps, UndoStep{After: transport.Settled(f.Err), Buries: true, Undo: func(ctx context.Context) error {
			if err := FirstErr(q.fanout(ctx, node, bury)); err != nil {
				return err
			}
			return on(node)(ctx)
		}})
	}
	return steps
}

// raiseFences decides the fence of a round that a majority granted (t):
// the highest granted value, raised on every node that answered, issued
// only when a majority of those is marked and folded (see the package
// doc, "Fences on a quorum", for why it then never repeats).
func (q *Quorum) raiseFences(ctx context.Context, k *protocol.Keys, t tally) (int64, error) {
	var want int64
	for _, i := range t.ok {
		want = max(want, t.vals[i][1])
	}
	answered := append(slices.Clone(t.ok), t.no...)
	folded, why := q.folds.Snapshot() // before the counters are read
	var unfolded []NodeFailure
	for i, done := range folded {
		if !done {
			unfolded = append(unfolded, NodeFailure{i, why[i]})
		}
	}
	mark := q.mark
	run := func(nodes []int, fence int64, markThem bool) tally {
		return q.tally(q.fanout(ctx, nodes, func(int) protocol.Call {
			return protocol.QuorumFenceArgs{Fence: fence, Mark: markThem}.Call(k, mark)
		}), nodes, func(v []int64) bool { return len(v) == 2 })
	}
	r := run(answered, want, false)
	fence, marked, counted := want, 0, 0
	for _, i := range r.ok {
		c := r.vals[i][1]
		if c > want || !slices.Contains(t.ok, i) {
			c++ // a counter this round did not make: it may have been issued
		}
		fence = max(fence, c)
		marked += int(r.vals[i][0])
		if r.vals[i][0] == 1 && folded[i] {
			counted++
		}
	}
	switch {
	case counted >= q.majority():
	case marked == 0 && len(r.ok) == len(q.nodes) && len(unfolded) == 0:
		// a new deployment: every node answers, none is marked, every
		// one is folded
	default:
		// Who is not yet seen: on a new quorum (none marked) the nodes
		// that did not answer, whose first answer marks them all; else
		// also those that answered but are not marked (restarted
		// without persistence: marked by the next fence a marked
		// majority issues).
		var notSeen []int
		for i := range q.nodes {
			if v, ok := r.vals[i]; !ok || (marked > 0 && v[0] == 0) {
				notSeen = append(notSeen, i)
			}
		}
		return 0, q.fail(QuorumFailure{Op: "fence", Name: k.Name, OK: counted, Needed: q.majority(), Failing: r.failed,
			NotSeen: notSeen, Unfolded: unfolded})
	}
	if fence == want && marked == len(r.ok) {
		return fence, nil // every node that answered has it, and is marked
	}
	w := q.tally(q.fanout(ctx, r.ok, func(int) protocol.Call {
		return protocol.QuorumFenceArgs{Fence: fence, Mark: true}.Call(k, mark)
	}), r.ok, func(v []int64) bool { return len(v) == 2 && v[1] >= fence })
	if len(w.ok) < q.majority() {
		return 0, q.fail(QuorumFailure{Op: "fence", Name: k.Name, OK: len(w.ok), Needed: q.majority(), Failing: w.failed})
	}
	return fence, nil
}

// quorumProto is the Redis side of a RedLock hold: every call goes to all
// nodes and counts a majority.
type quorumProto struct {
	q *Quorum
	k *protocol.Keys
	m HoldOps // each node's: a Mutex's, whose ops are script calls
}

// call is a script call of a Mutex's protocol (every op of a protocol
// with scripts is one), to send to each node.
func call(o Op) protocol.Call { return o.(protocol.Call) }

// quorumOp fans a Mutex protocol call out to every node and folds the
// replies into one reply of the same convention.
type quorumOp struct {
	p    quorumProto
	name string // "lock", "unlock", "renew", "ttl"
	mk   func(node int) protocol.Call
	isOK func([]int64) bool
	fold func(t tally, ok bool) any
	// pre, if set, is sent just before mk's call, in the same pipeline;
	// its reply is not counted
	pre func(node int) protocol.Call
}

func (o quorumOp) Run(ctx context.Context, _ driver.Driver) driver.Reply {
	return o.p.q.runOps(ctx, []quorumOp{o})[0]
}

// errNoReplyYet stands for the reply of a node that had not answered when
// a majority had decided.
var errNoReplyYet = errors.New("no reply before the majority decided")

// runOps runs quorum operations as one pipeline per node, on all nodes at
// once, each bounded by the node timeout, and returns one folded reply per
// operation. Renewals return as soon as every one is decided by a
// majority: a hung node delays nothing once the others have answered, and
// its calls are abandoned (Close waits for them to end). Other operations
// (release, re-entry, TTL) wait for every node, so that a release has
// reached every node that answers when Unlock returns.
func (q *Quorum) runOps(ctx context.Context, ops []quorumOp) []driver.Reply {
	type reply struct {
		node int
		cmds []driver.Reply
	}
	replies := make(chan reply, len(q.nodes)) // stragglers never block
	ctx, cancel := context.WithCancel(ctx)    // ends the stragglers
	defer cancel()
	for i, n := range q.nodes {
		calls := make([]protocol.Call, 0, len(ops))
		var at []int // where each op's own call is in calls
		for _, o := range ops {
			if o.pre != nil {
				calls = append(calls, o.pre(i))
			}
			at = append(at, len(calls))
			calls = append(calls, o.mk(i))
		}
		q.stragglers.Add(1)
		go func() {
			defer q.stragglers.Done()
			nctx, cancel := context.WithTimeout(ctx, q.timeout)
			defer cancel()
			all := RunBatch(nctx, n, calls, ReplicaSync{})
			own := make([]driver.Reply, len(at))
			for j, k := range at {
				own[j] = all[k]
			}
			replies <- reply{i, own}
		}()
	}
	ts := make([]tally, len(ops))
	for j := range ts {
		ts[j].vals = map[int][]int64{}
	}
	answered := make([]bool, len(q.nodes))
	for range q.nodes {
		r := <-replies
		answered[r.node] = true
		all := true
		for j, o := range ops {
			ts[j].add(r.node, r.cmds[j], o.isOK)
			all = all && o.name == "renew" && q.decided(ts[j])
		}
		if all {
			break
		}
	}
	out := make([]driver.Reply, len(ops))
	for j, o := range ops {
		out[j] = q.reply(o, ts[j], answered)
	}
	return out
}

// reply folds an operation's tally into its reply; nodes that had not
// answered count as failed with errNoReplyYet.
func (q *Quorum) reply(o quorumOp, t tally, answered []bool) driver.Reply {
	ok, err := q.outcome(t, o.name, o.p.k.Name, answered)
	if err == nil {
		return driver.Reply{Val: o.fold(t, ok)}
	}
	return protocol.FailedReply(err)
}

func (p quorumProto) Reenter(token string, count int, ttl time.Duration, seq int64) Op {
	// A node that answers STALE ran a later command of the hold: it holds.
	return quorumOp{p: p, name: "lock", mk: func(int) protocol.Call { return call(p.m.(Reentrant).Reenter(token, count, ttl, seq)) },
		isOK: func(v []int64) bool {
			return len(v) == 2 && v[0] == protocol.ReplyHeld || len(v) == 1 && v[0] == protocol.ReplyStale
		},
		fold: func(t tally, ok bool) any {
			if !ok {
				return []any{int64(protocol.ReplyNotHeld)}
			}
			return []any{int64(protocol.ReplyHeld), int64(0)}
		}}
}

func (p quorumProto) Release(token string, left int, seq int64) Op {
	o := quorumOp{p: p, name: "unlock", mk: func(int) protocol.Call { return call(p.m.Release(token, left, seq)) },
		isOK: func(v []int64) bool { return v[0] == 1 || v[0] == protocol.ReplyStale },
		fold: func(t tally, ok bool) any { return either(ok, 1, protocol.ReplyNotHeld) }}
	if left == 0 {
		// A node that did not answer the acquire (stopped, partitioned)
		// may run it after this release: buried first, the token takes
		// nothing there then, and the lock is not left held by nobody
		// for its TTL (a majority that needs the node could not form).
		o.pre = func(int) protocol.Call {
			return protocol.BuryArgs{Token: token, For: releaseBury.Milliseconds()}.Call(p.k)
		}
	}
	return o
}

func (p quorumProto) Renew(token string, ttl time.Duration, exact bool, seq int64) Op {
	return quorumOp{p: p, name: "renew", mk: func(int) protocol.Call { return call(p.m.Renew(token, ttl, exact, seq)) },
		isOK: func(v []int64) bool { return v[0] == 1 || v[0] == protocol.ReplyStale },
		fold: func(t tally, ok bool) any { return either(ok, 1, 0) }}
}

// TTL is how long a majority still holds the lock: the majority-th
// longest of the nodes' PTTLs.
func (p quorumProto) TTL(token string) Op {
	return quorumOp{p: p, name: "ttl", mk: func(int) protocol.Call { return call(p.m.TTL(token)) },
		isOK: func(v []int64) bool { return v[0] >= 0 },
		fold: func(t tally, ok bool) any {
			if !ok {
				return int64(protocol.ReplyTTLNotHeld)
			}
			left := make([]int64, 0, len(t.ok))
			for _, i := range t.ok {
				left = append(left, t.vals[i][0])
			}
			slices.Sort(left)
			slices.Reverse(left)
			return left[p.q.majority()-1]
		}}
}

// The quorum as a backend: it runs a Mutex, with re-entry.

// Caps is a re-entrant Mutex; no hand-off and no reservation (the nodes'
// queues may disagree on who is next), waiters told on their own channel.
func (q *Quorum) Caps() Caps {
	return Caps{Reentry: true, NotThere: errNotOnQuorum, Directed: true, Bury: true}
}

// Everywhere runs c on every node at once.
func (q *Quorum) Everywhere(ctx context.Context, c protocol.Call) error {
	return FirstErr(q.fanout(ctx, q.all(), func(int) protocol.Call { return c }))
}

// Close waits for the node calls that outlived their operation.
func (q *Quorum) Close() { q.stragglers.Wait() }

// Run runs a quorumOp: it fans out to the nodes itself.
func (q *Quorum) Run(ctx context.Context, o Op) driver.Reply { return o.Run(ctx, nil) }

// Attempt returns a Mutex's protocol on the quorum, each call sent to
// every node, and its RedLock rounds (lock). a.Ops is the Mutex's own
// protocol (re-entrant, script calls), a.Call its acquire and a.Leave
// how a waiter leaves the queue, which it sends to each node.
func (q *Quorum) Attempt(a *AttemptSpec) (HoldOps, AttemptFunc) {
	return quorumProto{q, a.K, a.Ops}, func(ctx context.Context, queued, _ bool) (Outcome, error) {
		m := ""
		if queued {
			m = a.Member
		}
		return q.lock(ctx, a, m, queued)
	}
}

// Grant runs a quorum operation (it goes to every node).
func (q *Quorum) Grant(ctx context.Context, o Op) driver.Reply { return o.Run(ctx, nil) }

// Batch runs quorum operations as one Batch per node, all nodes at once.
func (q *Quorum) Batch(ctx context.Context, ops []Op, _ bool) []driver.Reply {
	qops := make([]quorumOp, len(ops))
	for i, o := range ops {
		qops[i] = o.(quorumOp) // every op of a quorum is one
	}
	return q.runOps(ctx, qops)
}

// releaseBury is how long a quorum's final release refuses its token's
// late acquires on each node (bury.lua).
const releaseBury = time.Minute

// either is yes if ok, else no: a script's integer reply.
func either(ok bool, yes, no int64) int64 {
	if ok {
		return yes
	}
	return no
}

// errNotOnQuorum is returned by the primitives a quorum does not offer.
func errNotOnQuorum(what string) error {
	return fmt.Errorf("dlock: %s is not available on a quorum (NewQuorum): %w", what, errors.ErrUnsupported)
}

func (quorumProto) Ordered() bool { return true }

// A quorum's Mutex re-enters (the acquire path finds it by a type
// assertion).
var _ Reentrant = quorumProto{}

func (p quorumProto) Free(token string, _ int64, _ time.Duration) Op {
	return p.Release(token, 0, 0)
}
