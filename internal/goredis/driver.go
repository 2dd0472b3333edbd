package goredis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/keyslot"
	"github.com/dlock-go/dlock/internal/wire"
	"github.com/redis/go-redis/v9"
)

// Redis is what the driver needs of a go-redis v9 client: every go-redis
// client has it (*redis.Client, *redis.ClusterClient, the failover client,
// and so redis.UniversalClient). It has the method set of dlock.Redis,
// which the root declares itself so that go doc shows the methods: a value
// of either interface is one of the other.
type Redis interface {
	Process(ctx context.Context, cmd redis.Cmder) error
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
	SSubscribe(ctx context.Context, channels ...string) *redis.PubSub
	Watch(ctx context.Context, fn func(*redis.Tx) error, keys ...string) error
}

// Driver is the driver.Driver of a go-redis client. It is safe for
// concurrent use, as the client is.
type Driver struct {
	rdb     Redis
	wire    *ownConns            // dlock's own connections, for a plain client's commands (Own)
	cluster *redis.ClusterClient // rdb, when it is a cluster's
	cw      *clusterWire         // dlock's own connections to a cluster's masters (Own)
	resend  time.Duration        // Info's ResendAfter (resendAfter)

	mu    sync.Mutex
	nodes map[string]*redis.Client // a cluster's masters that NodeOf named, by address
	// stale: Refresh was called since NodeOf last asked a master where a
	// slot is (askedOwner): go-redis's own map, reloaded at most every
	// 200 ms and from any node, can be stale that long after a move.
	stale atomic.Bool
}

// New returns the Driver of rdb (dlock.New, dlock.GoRedisDriver and
// dlock.NewQuorum's nodes) that sends every command through rdb. rdb must
// not be nil.
func New(rdb Redis) *Driver {
	cc, _ := rdb.(*redis.ClusterClient)
	return &Driver{rdb: rdb, cluster: cc, resend: resendAfter(rdb), nodes: map[string]*redis.Client{}}
}

// Own returns the Driver of rdb that sends its commands (Do, Pipeline,
// Dedicated) on connections of its own (internal/wire), made from rdb's
// options, when rdb is a *redis.Client of a single node (not a failover
// client's: see failover) with no OnConnect hook and no streaming
// credentials; on a
// *redis.ClusterClient (the same provisos, and no ClusterSlots of its
// own) its keyed commands go on connections of its own to each master
// (clusterWire); New's otherwise. Pub/sub goes through rdb either way. Close closes the
// connections.
func Own(rdb Redis) *Driver {
	g := New(rdb)
	if g.cluster != nil {
		if g.cw = ownCluster(g.cluster); g.cw != nil {
			g.resend = 0 // a keyed call on the wire sent again says so (SentTwice)
		}
		return g
	}
	r, ok := rdb.(*redis.Client)
	if !ok {
		return g
	}
	o := r.Options()
	if o.OnConnect != nil || o.StreamingCredentialsProvider != nil || o.Dialer == nil || failover(o) {
		return g
	}
	g.wire = newOwnConns(r, o)
	g.resend = 0 // a call on the wire sent again says so (SentTwice)
	return g
}

// failover reports whether o are the options of a failover client
// (redis.NewFailoverClient), whose Addr go-redis sets to "FailoverClient".
// Its commands go through its pool, not on connections of Own's: go-redis
// alone hears the sentinels announce a new master (+switch-master, on a
// connection to a sentinel it keeps to itself) and then closes its pool's
// connections to the old one (its onFailover), within milliseconds. Own's
// connections, made through the same Dialer, would reach the new master
// only once they had failed; the old master still calls itself master
// and takes writes until the sentinels demote it, about 10 s later, and a
// lock taken there meanwhile is one a Client on the new master takes too
// (issue 45). Following the switch ourselves would need the sentinels'
// addresses, which the client does not show; asking the Dialer where the
// master is would cost a round trip to a sentinel per check.
func failover(o *redis.Options) bool { return o.Addr == "FailoverClient" }

// ownMux is dlock's own connections to the server at addr, made from a
// go-redis client's options o: its Dialer, credentials, database, name,
// timeouts and MaxRetries.
func ownMux(o *redis.Options, addr string) *wire.Mux { return wire.New(ownConfig(o, addr)) }

// ownConfig is the configuration of ownMux's connections.
func ownConfig(o *redis.Options, addr string) wire.Config {
	return wire.Config{
		Dial:         func(ctx context.Context) (net.Conn, error) { return o.Dialer(ctx, o.Network, addr) },
		Hello:        func(ctx context.Context) ([]driver.Command, error) { return hello(ctx, o) },
		DialTimeout:  max(o.DialTimeout, 0),
		ReadTimeout:  max(o.ReadTimeout, 0),
		WriteTimeout: max(o.WriteTimeout, 0),
		MaxRetries:   max(o.MaxRetries, 0),
	}
}

// hello is what a new connection of Own's sends first, from the client's
// options: AUTH with its credentials, SELECT its database, CLIENT SETNAME
// its name.
func hello(ctx context.Context, o *redis.Options) ([]driver.Command, error) {
	user, pass := o.Username, o.Password
	switch {
	case o.CredentialsProviderContext != nil:
		var err error
		if user, pass, err = o.CredentialsProviderContext(ctx); err != nil {
			return nil, fmt.Errorf("dlock: credentials: %w", err)
		}
	case o.CredentialsProvider != nil:
		user, pass = o.CredentialsProvider()
	}
	var cmds []driver.Command
	switch {
	case pass != "" && user != "":
		cmds = append(cmds, driver.Command{Args: []any{"AUTH", user, pass}})
	case pass != "":
		cmds = append(cmds, driver.Command{Args: []any{"AUTH", pass}})
	}
	if o.DB != 0 {
		cmds = append(cmds, driver.Command{Args: []any{"SELECT", o.DB}})
	}
	if o.ClientName != "" {
		cmds = append(cmds, driver.Command{Args: []any{"CLIENT", "SETNAME", o.ClientName}})
	}
	return cmds, nil
}

// Close closes the connections of Own's driver (not rdb); it is safe to
// call more than once. Closing rdb closes them too, once a pipeline or
// (on one server) a dial finds it closed (ownConns, clusterWire.goneNow).
func (g *Driver) Close() error {
	switch {
	case g.wire != nil:
		return g.wire.Close()
	case g.cw != nil:
		return g.cw.close()
	}
	return nil
}

// Info: a cluster's when rdb is a *redis.ClusterClient; on dlock's own
// connections, bound by ctx and batched, never sent twice without the
// reply saying so (ResendAfter 0: wire, "Never sent twice unsaid").
func (g *Driver) Info() driver.Info {
	own := g.wire != nil || g.cw != nil
	return driver.Info{Name: "go-redis", Cluster: g.cluster != nil, ResendAfter: g.resend, AutoPipeline: own, CtxBound: own}
}

// resendAfter is how long go-redis waits for a reply before it sends the
// call again (driver.Info.ResendAfter): its ReadTimeout, read from the
// options it normalised (a ReadTimeout of 0 means none there; MaxRetries
// 0, none), unless it never retries. go-redis also sends a call again
// after its connection reset or closed (MaxRetries > 0), at any time, not
// only after ReadTimeout: no duration says those, so each keyed call's
// reply does (markedCmd, driver.Reply.SentTwice); the ReadTimeout is
// kept as well, for a re-send that a wrapper of go-redis makes unasked. A cluster client also re-sends
// through its redirects (MaxRedirects), so there the ReadTimeout alone
// counts. A client whose options cannot be read (a Ring, a wrapper) is
// taken to re-send after go-redis's default ReadTimeout: a lock whose
// acquire took that long is buried at its release, at the cost of a call.
func resendAfter(rdb Redis) time.Duration {
	switch r := rdb.(type) {
	case *redis.Client:
		if o := r.Options(); o.MaxRetries > 0 {
			return max(o.ReadTimeout, 0)
		}
		return 0
	case *redis.ClusterClient:
		return max(r.Options().ReadTimeout, 0)
	}
	return defaultReadTimeout
}

// defaultReadTimeout is go-redis's ReadTimeout when none is set.
const defaultReadTimeout = 5 * time.Second

// goCmd makes the go-redis command of c, routed by its first key.
func goCmd(ctx context.Context, c driver.Command) *redis.Cmd {
	cmd := redis.NewCmd(ctx, c.Args...)
	if c.Keys > 0 {
		cmd.SetFirstKeyPos(int8(c.FirstKey))
	}
	return cmd
}

// markedCmd is a keyed command sent through go-redis's pool, which tells
// whether go-redis may have sent it twice. go-redis sends a command again
// (MaxRetries) after a read timeout and after a reset or a close of its
// connection (EOF, ECONNRESET, EPIPE: a proxy or load balancer
// restarting), which can come at any time, its first copy run or still on
// its way; before each re-send it asks the command whether it may
// (NoRetry), and markedCmd counts the asks. go-redis also asks once of
// an attempt that ended with the server's reply an error (redis.Nil
// included) before it returns it; so a command answered by the server
// was sent twice when asked twice or more, one answered otherwise when
// asked at all (a failure after a re-send, or one that was not re-sent:
// a mark too many, on a reply the acquire path takes as outcome-unknown
// anyway). Keyless commands are not marked: go-redis's cluster
// aggregates some of those by their type (*redis.Cmd), and no acquire is
// keyless.
type markedCmd struct {
	*redis.Cmd
	asks atomic.Int32
}

// NoRetry lets go-redis send the command again, and counts the ask.
func (c *markedCmd) NoRetry() bool {
	c.asks.Add(1)
	return false
}

// sentTwice reports whether go-redis may have sent c twice, r its reply.
func (c *markedCmd) sentTwice(r driver.Reply) bool {
	n := c.asks.Load()
	if _, answered := r.Err.(*driver.ErrorReply); answered || r.Err == nil && c.Err() != nil { // a server error, or redis.Nil
		return n >= 2
	}
	return n >= 1
}

// goCmder makes the go-redis command of c, marked when keyed (markedCmd).
func goCmder(ctx context.Context, c driver.Command) redis.Cmder {
	cmd := goCmd(ctx, c)
	if c.Keys == 0 {
		return cmd
	}
	return &markedCmd{Cmd: cmd}
}

// replyOf is the neutral reply of a command goCmder made.
func replyOf(cmd redis.Cmder) driver.Reply {
	switch c := cmd.(type) {
	case *markedCmd:
		r := goReply(c.Cmd)
		r.SentTwice = c.sentTwice(r)
		return r
	case *redis.Cmd:
		return goReply(c)
	}
	return driver.Reply{Err: fmt.Errorf("dlock: a command of type %T", cmd)} // (goCmder makes none)
}

// goReply is the neutral reply of a go-redis command.
func goReply(cmd *redis.Cmd) driver.Reply {
	v, err := cmd.Result()
	switch {
	case err == nil:
		return driver.Reply{Val: neutral(v)}
	case errors.Is(err, redis.Nil):
		return driver.Reply{}
	}
	if _, ok := errors.AsType[redis.Error](err); ok {
		return driver.Reply{Err: &driver.ErrorReply{Err: err}}
	}
	return driver.Reply{Err: err}
}

// neutral turns a go-redis value into a Reply's: maps as their keys and
// values in turn, arrays element by element.
func neutral(v any) any {
	switch v := v.(type) {
	case []any:
		for i, e := range v {
			v[i] = neutral(e)
		}
		return v
	case map[any]any:
		out := make([]any, 0, 2*len(v))
		for k, e := range v {
			out = append(out, neutral(k), neutral(e))
		}
		return out
	case redis.Error:
		return &driver.ErrorReply{Err: v}
	}
	return v
}

// Do sends c, routed by its first key, and returns its reply.
func (g *Driver) Do(ctx context.Context, c driver.Command) driver.Reply {
	if g.wire != nil {
		return g.wire.Do(ctx, c)
	}
	if g.cw != nil {
		return g.cw.do(ctx, c, firstKey(c))
	}
	cmd := goCmder(ctx, c)
	_ = g.rdb.Process(ctx, cmd)
	return replyOf(cmd)
}

// Pipeline sends cmds as one go-redis pipeline (a cluster client splits
// it by node).
func (g *Driver) Pipeline(ctx context.Context, cmds []driver.Command) []driver.Reply {
	if g.wire != nil {
		return g.wire.Pipeline(ctx, cmds)
	}
	if g.cw != nil {
		return g.cw.pipeline(ctx, cmds)
	}
	return goPipeline(ctx, g.rdb.Pipelined, cmds)
}

// goPipeline sends cmds as one go-redis pipeline.
func goPipeline(ctx context.Context, run func(context.Context, func(redis.Pipeliner) error) ([]redis.Cmder, error),
	cmds []driver.Command) []driver.Reply {
	sent := make([]redis.Cmder, len(cmds))
	_, _ = run(ctx, func(p redis.Pipeliner) error {
		for i, c := range cmds {
			sent[i] = goCmder(ctx, c)
			_ = p.Process(ctx, sent[i])
		}
		return nil
	})
	out := make([]driver.Reply, len(cmds))
	for i, cmd := range sent {
		out[i] = replyOf(cmd)
	}
	return out
}

// goConn is a connection that Dedicated lends.
type goConn struct {
	pipelined func(context.Context, func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

func (c goConn) Pipeline(ctx context.Context, cmds []driver.Command) []driver.Reply {
	return goPipeline(ctx, c.pipelined, cmds)
}

// Dedicated lends a connection of the pool of key's node. A client that
// cannot lend one (a wrapper of go-redis's) lends the connection of a
// transaction on key, whose WATCH and UNWATCH cost two round trips.
func (g *Driver) Dedicated(ctx context.Context, key string, fn func(driver.Conn) error) error {
	if g.wire != nil {
		return g.wire.Dedicated(ctx, fn)
	}
	if g.cw != nil {
		return g.cw.dedicated(ctx, key, fn)
	}
	var node any = g.rdb
	if g.cluster != nil {
		n, err := g.cluster.MasterForKey(ctx, key)
		if err != nil {
			return err
		}
		node = n
	}
	if n, ok := node.(interface{ Conn() *redis.Conn }); ok {
		conn := n.Conn()
		defer conn.Close()
		return fn(goConn{conn.Pipelined})
	}
	return g.rdb.Watch(ctx, func(tx *redis.Tx) error { return fn(goConn{tx.Pipelined}) }, key)
}

// NodeOf returns the address of the master of key's slot, asking a master
// where it is after a Refresh (askedOwner); errors.ErrUnsupported when
// the client is not a cluster's.
func (g *Driver) NodeOf(ctx context.Context, key string) (string, error) {
	if g.cluster == nil {
		return "", errors.ErrUnsupported
	}
	n, err := g.cluster.MasterForKey(ctx, key)
	if err != nil {
		return "", err
	}
	if g.stale.Load() {
		if m, err := g.askedOwner(ctx, n, key); err == nil {
			n = m
			g.stale.Store(false)
		}
	}
	addr := n.Options().Addr
	g.mu.Lock()
	g.nodes[addr] = n
	g.mu.Unlock()
	return addr, nil
}

// askedOwner asks prev, the master of key's slot in go-redis's map,
// which master serves the slot now (CLUSTER SLOTS), and returns go-redis's
// client of it. The slot's old master knows where it went: a migration's
// source is told before it ends the subscriptions of the slot's
// channels, and a demoted master follows its successor, while go-redis
// reloads its map from a node at random, which (a replica most) may learn
// it a gossip round later. When prev does not answer (gone with a
// failover), go-redis's map is reloaded from any node.
func (g *Driver) askedOwner(ctx context.Context, prev *redis.Client, key string) (*redis.Client, error) {
	ranges, err := prev.ClusterSlots(ctx).Result()
	if err != nil {
		if err := g.reload(ctx); err != nil {
			return nil, err
		}
		return g.cluster.MasterForKey(ctx, key)
	}
	slot, addr := keyslot.Of(key), ""
	for _, r := range ranges {
		if r.Start <= slot && slot <= r.End && len(r.Nodes) > 0 {
			addr = r.Nodes[0].Addr
		}
	}
	switch addr {
	case "":
		return nil, fmt.Errorf("dlock: no master serves slot %d", slot)
	case prev.Options().Addr:
		return prev, nil
	}
	g.mu.Lock()
	n := g.nodes[addr]
	g.mu.Unlock()
	if n != nil {
		return n, nil
	}
	// a master NodeOf has not named yet: go-redis's client of it
	// (ForEachMaster reloads the map first)
	err = g.cluster.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		if c.Options().Addr == addr {
			g.mu.Lock()
			n = c
			g.mu.Unlock()
		}
		return nil
	})
	if err == nil && n == nil {
		err = fmt.Errorf("dlock: the master %s of slot %d is not among go-redis's nodes yet", addr, slot)
	}
	return n, err
}

// Masters returns the Driver of each master of a cluster, or g alone.
func (g *Driver) Masters(ctx context.Context) ([]driver.Driver, error) {
	if g.cluster == nil {
		return []driver.Driver{g}, nil
	}
	var mu sync.Mutex
	var out []driver.Driver
	err := g.cluster.ForEachMaster(ctx, func(_ context.Context, n *redis.Client) error {
		mu.Lock()
		out = append(out, New(n))
		mu.Unlock()
		return nil
	})
	return out, err
}

// Refresh makes a cluster client reload its slot map, and the next
// NodeOf ask a master where the slot is.
func (g *Driver) Refresh() {
	if g.cluster != nil {
		if g.cw != nil {
			g.cw.forget()
		}
		g.stale.Store(true) // and the next NodeOf asks a master (askedOwner)
		g.cluster.ReloadState(context.Background())
	}
}

// reload makes go-redis reload its slot map now (one CLUSTER SLOTS, of a
// node at random): ForEachShard reloads it before it calls anything, and
// here calls nothing. (go-redis's own reloads come at most every 200 ms.)
func (g *Driver) reload(ctx context.Context) error {
	return g.cluster.ForEachShard(ctx, func(context.Context, *redis.Client) error { return nil })
}
