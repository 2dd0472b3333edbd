// Package rueidisdlock runs dlock on a rueidis client
// (github.com/redis/rueidis): a single node, a Sentinel-managed primary or
// a Redis Cluster, whichever the client was made for.
//
//	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"localhost:6379"}})
//	...
//	locks, err := rueidisdlock.New(client, dlock.WithPrefix("myapp"))
//	...
//	defer locks.Close() // before client.Close()
//
// The Client it returns is dlock's in every respect; only the way to Redis
// differs. The application keeps owning the rueidis client: close the
// dlock Client first (it releases what it still holds), then the rueidis
// client.
//
// What the driver does for dlock that rueidis does not do by itself:
//
//   - A WAIT after a write (dlock.WithReplicaSync) and the script-free
//     mode's WATCH/MULTI/EXEC go on a dedicated connection to the node of
//     the lock's key (rueidis's Dedicate), so that they follow the write
//     on the same connection.
//   - Its pub/sub connections are dedicated connections that it
//     resubscribes itself when they break, so that every (re)confirmation
//     makes dlock's waiters check their lock again.
//   - On a cluster, Masters lists the masters only (rueidis's Nodes lists
//     replicas too), and NodeOf reads the slot map from CLUSTER SLOTS.
//
// Every call returns when its ctx ends, on its caller's goroutine (no
// goroutine per call, as on go-redis): the ctx goes into rueidis, without
// its deadline (which it still ends at), so that rueidis queues the
// command and watches the ctx rather than closing an idle connection at
// the deadline. A call given up on fails with an error that matches
// ctx.Err(), and dlock needs to know when its command can no longer run
// on the server (its undo must not run first). A rueidis client spreads a
// node's keyed commands over several connections
// (ClientOption.PipelineMultiplex), so a command abandoned on one could
// run after a later one sent on another; the driver therefore sends its
// commands without a slot on a single node's client, which rueidis then
// sends on one connection, in order, and knows a given-up command settled
// when a PING sent after it on that connection returns (its reply came
// first, or the connection failed). A cluster client keeps one connection
// per node by default; with ClientOption.PipelineMultiplex above 0 on a
// cluster, the PING may go on another connection than the command and
// return first, so that an undo may reach the server before a given-up
// acquire: leave it at 0 on a cluster client that dlock uses. At most 512
// of the driver's calls are unsettled at once (rueidis waits for room in
// a connection's ring without looking at the ctx; keep
// ClientOption.RingScaleEachConn at its default or above). Two waits of
// rueidis no ctx bounds are run on a goroutine of their own instead: a
// dedicated connection (Dedicate: a WAIT after a write, the script-free
// mode), and, from a call that found its connection broken until a call
// has had its reply again, every call (rueidis dials a new connection
// meanwhile, for its own dial timeout whatever the ctx says). rueidis's
// own timeouts (ClientOption.ConnWriteTimeout) still end a call to a
// server that does not answer; a reply that is only late is waited for
// (one 300 ms late under a ConnWriteTimeout of 100 ms returned its
// result: TestAmbiguousAcquireFailedCleansUp), so bound a call by its
// ctx, not by the client's timeouts.
package rueidisdlock

import (
	"errors"
	"fmt"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/redis/rueidis"
)

// New returns a dlock Client that reaches Redis through client. It is
// dlock.New in all else: the options are dlock's, and so are the errors
// (an error wrapping dlock.ErrInvalidArgument for a nil client or bad
// options). It does not talk to Redis.
func New(client rueidis.Client, opts ...dlock.Option) (*dlock.Client, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil rueidis client", dlock.ErrInvalidArgument)
	}
	return dlock.NewWithDriver(NewDriver(client), opts...)
}

// NewDriver returns the driver.Driver of client, for dlock.NewWithDriver:
// New is NewWithDriver(NewDriver(client)). Wrapping it is a test's way to
// inject faults between dlock and rueidis. It panics if client is nil.
func NewDriver(client rueidis.Client) driver.Driver {
	if client == nil {
		panic("rueidisdlock: NewDriver with a nil client")
	}
	return newDriver(client, client.Mode() == rueidis.ClientModeCluster)
}

// errClosed is the error of a call on a closed pub/sub connection.
var errClosed = errors.New("rueidisdlock: pub/sub connection closed")
