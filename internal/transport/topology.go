package transport

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/backoff"
	"github.com/dlock-go/dlock/internal/errs"
)

// Topology changes. On a cluster a slot moves (a resharding) or its
// master fails over, and for a while a command for it meets MOVED, ASK,
// TRYAGAIN, CLUSTERDOWN, LOADING or READONLY, or a node that is gone
// (Transient). A Lock's attempt that meets one of those while its ctx
// lasts is not the end of the Lock: the Client refreshes its slot map
// (Topology.Hint) and the Lock waits and tries again, from MovingFirst
// doubling to MovingMax, or sooner when woken; when its ctx ends, the
// error says what the cluster was answering. The attempt's outcome is
// unknown meanwhile (it may have taken the lock), so a Lock that ends
// without the lock undoes it as for any failed attempt. A TryLock, and a
// Lock on one server or a quorum, returns the error at once. A command of
// a hold (an Unlock, Extend, TTL or re-entry) is run again the same way
// (Topology.Retry).

// Topology is what a Client knows of its deployment's shape: whether it
// is a cluster, and how to refresh the cluster's slot map. The acquire
// path and the holds' keeper are given it, a value passed down, and ask
// it for what a cluster in the middle of a change needs. A nil Topology
// is not a cluster's.
type Topology struct {
	d        driver.Driver // Refresh asks it for a new slot map
	cluster  bool
	reloaded atomic.Int64 // when Hint last asked for a slot map (unix ns)
}

// NewTopology returns d's Topology (d nil: a quorum's, none).
func NewTopology(d driver.Driver) *Topology {
	return &Topology{d: d, cluster: d != nil && d.Info().Cluster}
}

// Cluster reports whether the deployment is a Redis Cluster.
func (t *Topology) Cluster() bool { return t != nil && t.cluster }

// Hint refreshes a cluster's slot map after a call failed with err:
// go-redis follows MOVED by itself, but after a master dies it keeps
// dialling the dead node until its periodic reload (a minute). At most
// one refresh a second; the driver runs it in the background. Nothing
// for an error of the caller's own (bad input, a closed Client), nor off
// a cluster.
func (t *Topology) Hint(err error) {
	if !t.Cluster() || err == nil || errors.Is(err, errs.InvalidArgument) || errors.Is(err, errs.Closed) {
		return
	}
	now := time.Now().UnixNano()
	last := t.reloaded.Load()
	if now-last < int64(time.Second) || !t.reloaded.CompareAndSwap(last, now) {
		return
	}
	t.d.Refresh()
}

// Retry runs call, a command of a hold, again while a cluster answers it
// with a transient error and ctx lasts (see "Topology changes"): an
// Unlock, Extend, TTL or re-entry made during a failover follows the
// slot instead of failing with the dead master's dial error. Running one
// again is safe: a command that may have run (a connection reset after
// it was sent) answers its copy as done (its receipt, or its place in the
// hold's sequence: internal/hold/doc.go, "Late commands"); without
// scripts a release that ran answers its copy "not held", which only
// misreports it.
func (t *Topology) Retry(ctx context.Context, call func() driver.Reply) driver.Reply {
	pause := backoff.New(MovingFirst, MovingMax)
	for {
		r := call()
		if r.Err == nil || ctx.Err() != nil || !t.Cluster() || !Transient(r.Err) {
			return r
		}
		t.Hint(r.Err)
		timer := time.NewTimer(pause.Next())
		select {
		case <-ctx.Done():
			timer.Stop()
			return r
		case <-timer.C:
		}
	}
}
