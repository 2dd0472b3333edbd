package dlock

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/backend"

	"github.com/dlock-go/dlock/internal/transport"

	"github.com/dlock-go/dlock/driver"
)

// The RedLock backend itself (rounds, fences and their proof, "Fences on
// a quorum") is internal/backend's quorum.go; the root keeps its
// constructor, its options and the errors a user sees.

// quorumConfig is what the quorum options set.
type quorumConfig struct {
	timeout time.Duration // per node and call
	jitter  time.Duration // most random delay between contended rounds
}

// DefaultNodeTimeout bounds each node's part of a quorum call.
const DefaultNodeTimeout = 100 * time.Millisecond

// NewQuorum returns a Client whose Mutex is the RedLock algorithm over
// independent Redis masters (no replication between them; at least one,
// three or five in practice):
//
//   - acquire runs on every node at once, each bounded by the node timeout;
//     it succeeds when a majority granted it and the time spent leaves a
//     validity of TTL − elapsed − drift > 0; otherwise it is released on
//     every node, those whose reply was lost included;
//   - the fence is the highest counter of the nodes that answer, written
//     back to all of them, and is issued only when a majority of them are
//     known to hold every fence issued so far, older counters folded in
//     (an older dlock's, or the other WithSlotFences layout's: a node
//     counts once the Client's fold has ended there; see "Fences on a quorum":
//     fences never repeat, even after partitions and a node restarted
//     without persistence; a new deployment grants nothing until every
//     node has answered once);
//   - renewal, re-entry, TTL and release go to every node and count a
//     majority; the lease is lost when a majority can no longer be renewed
//     or its local deadline passes;
//   - a contended round waits for a release (each node publishes it) or the
//     holder's lease, plus a random jitter; a round that finds a majority of
//     nodes unreachable fails at once with a *QuorumError.
//
// Only Mutex (and LockAll of Mutexes, lock by lock) works on a quorum; the
// other primitives return an error matching errors.ErrUnsupported.
//
// A node restarted without persistence forgets the locks it granted and
// can give them a second time: keep a restarted node out of the quorum for
// at least the longest TTL in use (the "delayed restart" rule), or run it
// with appendfsync always.
func NewQuorum[R Redis](nodes []R, opts ...Option) (*Client, error) {
	if len(nodes) == 0 {
		return nil, invalid("NewQuorum of no nodes")
	}
	for i, n := range nodes {
		if any(n) == nil {
			return nil, invalid("NewQuorum: node %d is nil", i)
		}
	}
	cfg, err := configure(opts)
	if err != nil {
		return nil, err
	}
	rs := make([]driver.Driver, len(nodes))
	own := make([]io.Closer, len(nodes))
	for i, n := range nodes {
		d := goRedis(n, cfg)
		rs[i], own[i] = d, d
	}
	tel := newTelemetry(cfg)
	dep := newDeployment(cfg, tel)
	for i, n := range rs {
		rs[i] = transport.Stack(n, dep)
	}
	if cfg.noScripts || cfg.sync != (backend.ReplicaSync{}) || cfg.shardOK {
		return nil, invalid("NewQuorum: WithoutScripts, WithReplicaSync and WithShardedPubSub do not apply")
	}
	q := backend.QuorumConfig{Nodes: rs, Timeout: cfg.quorum.timeout, Jitter: cfg.quorum.jitter,
		Mark: cfg.prefix + ":quorum:mark", Drift: cfg.drift, Log: cfg.logger, Fail: quorumError}
	if q.Log == nil {
		q.Log = slog.New(slog.DiscardHandler)
	}
	if q.Timeout == 0 {
		q.Timeout = DefaultNodeTimeout
	}
	if q.Jitter == 0 {
		q.Jitter = 50 * time.Millisecond
	}
	if q.Timeout < 0 || q.Jitter < 0 {
		return nil, invalid("NewQuorum: negative node timeout or jitter")
	}
	c := start(backend.NewQuorum(q), rs, cfg, tel, dep)
	c.own = own
	return c, nil
}

// NodeError is one node's failure in a quorum call.
type NodeError struct {
	Node int // index in the slice given to NewQuorum
	Err  error
}

// Error says which node failed and how.
func (e NodeError) Error() string { return fmt.Sprintf("node %d: %v", e.Node, e.Err) }

// Unwrap returns the node's error.
func (e NodeError) Unwrap() error { return e.Err }

// QuorumError is returned when a quorum call could not reach a majority of
// nodes. errors.As finds it; Nodes says what each failed node answered,
// and errors.Is looks through them (for context.DeadlineExceeded, say).
//
// backend.Op "fence" is a lock that a majority granted but that no fence could be
// issued for (see NewQuorum): OK nodes of those that answered are known
// to hold every fence issued so far, Needed are needed, and NotSeen lists
// the nodes not known to (never seen by this deployment's fences since
// they last lost their state: a new quorum, a node restarted without
// persistence: on a new quorum, the nodes that have not answered yet),
// Failing those that did not answer, and Unfolded the nodes on which the
// Client has not yet folded older fence counters into its own (an older
// dlock's, one per lock name, or the other WithSlotFences layout's),
// each with why (the fold's error): such a node does not count towards
// Needed until its fold has ended, which the next acquire tries again.
type QuorumError struct {
	Op       string // "lock", "unlock", "renew", "ttl", "fence"
	Name     string
	OK       int // nodes that did what was asked
	Needed   int // the majority
	Failing  []NodeError
	NotSeen  []int       // backend.Op "fence": the nodes not yet known to hold every fence issued
	Unfolded []NodeError // backend.Op "fence": the nodes whose older fence counters are not yet folded
}

// quorumError is the error of a quorum call that no majority decided:
// the quorum backend makes each one with it (backend.QuorumConfig.Fail),
// so that every such error a user gets is a *QuorumError.
func quorumError(f backend.QuorumFailure) error {
	e := &QuorumError{Op: f.Op, Name: f.Name, OK: f.OK, Needed: f.Needed, NotSeen: f.NotSeen}
	for _, n := range f.Failing {
		e.Failing = append(e.Failing, NodeError(n))
	}
	for _, n := range f.Unfolded {
		e.Unfolded = append(e.Unfolded, NodeError(n))
	}
	return e
}

// Error says what the quorum call did and why each failing node failed.
func (e *QuorumError) Error() string {
	parts := make([]string, len(e.Failing))
	for i, n := range e.Failing {
		parts[i] = n.Error()
	}
	failing := ""
	if len(parts) > 0 {
		failing = " (" + strings.Join(parts, "; ") + ")"
	}
	if e.Op == "fence" {
		seen := make([]string, len(e.NotSeen))
		for i, n := range e.NotSeen {
			seen[i] = fmt.Sprint(n)
		}
		// the nodes that answered but are not folded (one not seen is
		// said once, as not seen)
		var folds []string
		for _, n := range e.Unfolded {
			if !slices.Contains(e.NotSeen, n.Node) {
				folds = append(folds, n.Error())
			}
		}
		unfolded := ""
		if len(folds) > 0 {
			unfolded = "; older fence counters (an older dlock's, one per lock name, or the other WithSlotFences layout's) " +
				"are not folded yet on " + strings.Join(folds, "; ") + ": a node counts once its fold has ended, " +
				"which the next acquire tries again"
		}
		if len(e.NotSeen) == 0 {
			return fmt.Sprintf("dlock: lock %q: a majority granted it, but no fence can be issued that is sure to be above "+
				"every fence issued so far: %d of the %d nodes needed are folded and known to hold them%s%s",
				e.Name, e.OK, e.Needed, unfolded, failing)
		}
		if e.OK == 0 {
			return fmt.Sprintf("dlock: lock %q: a majority granted it, but this quorum is new to fences: it issues its first "+
				"fence once every node has answered once (then a majority suffices); not yet seen: node %s%s%s",
				e.Name, strings.Join(seen, ", "), unfolded, failing)
		}
		return fmt.Sprintf("dlock: lock %q: a majority granted it, but no fence can be issued that is sure to be new: "+
			"%d of the %d nodes needed are known to hold every fence issued so far; not yet seen: node %s%s%s",
			e.Name, e.OK, e.Needed, strings.Join(seen, ", "), unfolded, failing)
	}
	return fmt.Sprintf("dlock: %s %q: %d of %d nodes needed answered%s", e.Op, e.Name, e.OK, e.Needed, failing)
}

// Unwrap returns the nodes' errors (Failing's, then Unfolded's).
func (e *QuorumError) Unwrap() []error {
	errs := make([]error, 0, len(e.Failing)+len(e.Unfolded))
	for _, n := range e.Failing {
		errs = append(errs, n)
	}
	for _, n := range e.Unfolded {
		errs = append(errs, n)
	}
	return errs
}
