package rueidisdlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/keyslot"
	"github.com/redis/rueidis"
)

// libDriver is the driver.Driver of a rueidis client. It is safe for
// concurrent use, as the client is.
type libDriver struct {
	client  rueidis.Client
	cluster bool     // client is a cluster's
	slots   *slotMap // the cluster's slot map (nil elsewhere)
	name    string   // driver.Info.Name
	settle  *settler // when calls given up on are settled (bound.go)
	redial  redial   // whether rueidis may be dialing (bound.go)
}

func newDriver(client rueidis.Client, cluster bool) *libDriver {
	d := &libDriver{client: client, cluster: cluster, name: "rueidis", settle: newSettler(client, cluster)}
	if cluster {
		d.slots = &slotMap{}
	}
	return d
}

// Info: rueidis sends the commands of concurrent callers together by
// itself (AutoPipeline), and the driver bounds every call by its ctx on
// its caller's goroutine, a call given up on failing with an *errs.Late
// that says when it is settled (CtxBound): see bound.go.
func (d *libDriver) Info() driver.Info {
	return driver.Info{Name: d.name, Cluster: d.cluster, AutoPipeline: true, CtxBound: true}
}

func (d *libDriver) Do(ctx context.Context, c driver.Command) driver.Reply {
	if ctx.Done() != nil && d.redial.unsure() {
		return apart(ctx, &d.redial, func(ctx context.Context) driver.Reply { return d.do(ctx, c, retries) }, failedOne, cleanOne)
	}
	r := d.do(ctx, c, retries)
	d.redial.saw(r.Err)
	return r
}

// do runs c within ctx on the caller's goroutine, and sends it again up to
// resends times when it meets a broken connection.
func (d *libDriver) do(ctx context.Context, c driver.Command, resends int) driver.Reply {
	if err := ctx.Err(); err != nil {
		return driver.Reply{Err: unsent(err)}
	}
	if !d.settle.enter(ctx) {
		return driver.Reply{Err: unsent(ctx.Err())}
	}
	for attempt := 0; ; attempt++ {
		cmd, err := build(d.client.B(), c, d.cluster, "", false)
		if err != nil {
			d.settle.leave()
			return driver.Reply{Err: err}
		}
		r := d.client.Do(queued(ctx), cmd)
		if err := r.NonRedisError(); gaveUp(ctx, err) {
			return driver.Reply{Err: d.settle.late(ctx.Err(), firstKey([]driver.Command{c}))}
		}
		if attempt == resends || !broken(r.NonRedisError()) || ctx.Err() != nil {
			d.settle.leave()
			return reply(r)
		}
		// Sent again on a connection rueidis dials now: a wait its
		// caller's ctx does not bound (see redial).
		d.redial.saw(r.NonRedisError())
		if ctx.Done() != nil {
			d.settle.leave()
			left := resends - attempt - 1
			return apart(ctx, &d.redial, func(ctx context.Context) driver.Reply { return d.do(ctx, c, left) }, failedOne, cleanOne)
		}
	}
}

// retries is how many times a command that met a broken connection is
// sent again (each time on a new one).
const retries = 2

// broken reports whether err says that the connection was found broken
// (closed or reset by the server, a proxy, a restart): rueidis replaces
// it, and a command sent again goes on a new one. go-redis sends a
// command again then, and dlock's scripts are written so that one sent
// again after it ran answers as it did; rueidis does not for commands it
// cannot tell are read-only, so the driver does. A timeout is not
// retried: its command may still be running.
func broken(err error) bool {
	return err != nil && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed))
}

func (d *libDriver) Pipeline(ctx context.Context, cmds []driver.Command) []driver.Reply {
	if ctx.Done() != nil && d.redial.unsure() {
		return apart(ctx, &d.redial, func(ctx context.Context) []driver.Reply { return d.pipeline(ctx, cmds) },
			func(err error) []driver.Reply { return failedAll(len(cmds), err) }, cleanAll)
	}
	out := d.pipeline(ctx, cmds)
	for _, r := range out {
		d.redial.saw(r.Err)
	}
	return out
}

// pipeline runs cmds within ctx on the caller's goroutine; those that
// met a broken connection are sent again (on a goroutine of their own
// when ctx can end: see redial).
func (d *libDriver) pipeline(ctx context.Context, cmds []driver.Command) []driver.Reply {
	if err := ctx.Err(); err != nil {
		return failedAll(len(cmds), unsent(err))
	}
	if !d.settle.enter(ctx) {
		return failedAll(len(cmds), unsent(ctx.Err()))
	}
	var late error // the error of the commands given up on, made once
	given := func() error {
		if late == nil {
			late = d.settle.late(ctx.Err(), routes(cmds, d.cluster)...)
		}
		return late
	}
	out := pipeline(ctx, d.client, cmds, d.cluster, "", given)
	for attempt := 0; attempt < retries && late == nil && ctx.Err() == nil; attempt++ {
		var again []int
		for i, r := range out {
			if broken(r.Err) {
				again = append(again, i)
			}
		}
		if len(again) == 0 {
			break
		}
		redo := make([]driver.Command, len(again))
		for j, i := range again {
			redo[j] = cmds[i]
		}
		d.redial.saw(out[again[0]].Err)
		var rs []driver.Reply
		if ctx.Done() != nil {
			rs = apart(ctx, &d.redial, func(ctx context.Context) []driver.Reply {
				return pipeline(ctx, d.client, redo, d.cluster, "", nil)
			}, func(err error) []driver.Reply { return failedAll(len(redo), err) }, cleanAll)
		} else {
			rs = pipeline(ctx, d.client, redo, d.cluster, "", nil)
		}
		for j, r := range rs {
			out[again[j]] = r
		}
	}
	if late == nil {
		d.settle.leave() // else the probe gives the place back
	}
	return out
}

// failedAll returns n replies that failed with err.
func failedAll(n int, err error) []driver.Reply {
	out := make([]driver.Reply, n)
	for i := range out {
		out[i] = driver.Reply{Err: err}
	}
	return out
}

// pipeline sends cmds with one DoMulti of client, within ctx. On a
// cluster, commands without keys go to the node of the first command's
// key (a TIME beside a lock's keys); with pin, every command goes to the
// node of pin's slot (a dedicated connection of a cluster: see conn). A
// command that cannot be built fails on its own; the others are sent.
// When ctx ends before the replies come, the commands sent fail with
// late's error (called once; late is nil for a ctx that cannot end).
func pipeline(ctx context.Context, client rueidis.CoreClient, cmds []driver.Command, cluster bool, pin string, late func() error) []driver.Reply {
	out := make([]driver.Reply, len(cmds))
	all := pin != ""
	if cluster && pin == "" {
		pin = firstKey(cmds)
	}
	built := make([]rueidis.Completed, 0, len(cmds))
	at := make([]int, 0, len(cmds)) // the index in cmds of each built command
	for i, c := range cmds {
		cmd, err := build(client.B(), c, cluster || all, pin, all)
		if err != nil {
			out[i] = driver.Reply{Err: err}
			continue
		}
		built = append(built, cmd)
		at = append(at, i)
	}
	if len(built) == 0 {
		return out
	}
	rs := client.DoMulti(queued(ctx), built...)
	for _, r := range rs {
		if late != nil && gaveUp(ctx, r.NonRedisError()) {
			err := late()
			for _, i := range at {
				out[i] = driver.Reply{Err: err}
			}
			return out
		}
	}
	for j, r := range rs {
		out[at[j]] = reply(r)
	}
	return out
}

// routes returns the keys that route cmds on a cluster (none elsewhere):
// the first key of each, or the first command's key for those without.
func routes(cmds []driver.Command, cluster bool) []string {
	if !cluster {
		return nil
	}
	pin := firstKey(cmds)
	keys := make([]string, 0, len(cmds))
	for _, c := range cmds {
		if k := firstKey([]driver.Command{c}); k != "" {
			keys = append(keys, k)
		} else if pin != "" {
			keys = append(keys, pin)
		}
	}
	return keys
}

// firstKey returns the first key of the commands that have one.
func firstKey(cmds []driver.Command) string {
	for _, c := range cmds {
		if c.Keys > 0 && c.FirstKey < len(c.Args) {
			return argString(c.Args[c.FirstKey])
		}
	}
	return ""
}

// build makes the rueidis command of c. On a cluster (slotted), its
// first key routes it (its other keys go as plain words: keys of several
// slots are the server's CROSSSLOT error, not a panic in rueidis's
// builder); SPUBLISH, which has no key, is routed by its channel; a
// command without keys goes to the node of pin's slot when pin is set;
// with all, every command does (a dedicated connection of a cluster: see
// conn). Elsewhere it has no slot, so that rueidis sends every command of
// the driver on the node's first connection, in order (bound.go): a
// single node's client spreads commands with a slot over
// ClientOption.PipelineMultiplex connections. Every command prefers
// rueidis's pipelined connections (ToPipe): under
// ClientOption.DisableAutoPipelining a command without it goes on a
// pooled connection that rueidis reads on the caller's goroutine
// without watching ctx.
func build(b rueidis.Builder, c driver.Command, slotted bool, pin string, all bool) (rueidis.Completed, error) {
	// the words in an array on the stack (a longer command's grow on the
	// heap): rueidis's builder copies them into a command of its own
	var buf [24]string
	words := c.AppendStringArgs(buf[:0])
	if len(words) == 0 || words[0] == "" {
		return rueidis.Completed{}, errors.New("rueidisdlock: empty command")
	}
	name := words[0] // compared without case, and not upper-cased: a copy per command
	if n := len("SUBSCRIBE"); len(name) >= n && strings.EqualFold(name[len(name)-n:], "SUBSCRIBE") {
		return rueidis.Completed{}, fmt.Errorf("rueidisdlock: %s outside a pub/sub connection", words[0])
	}
	if !slotted {
		return b.Arbitrary(words...).Build().ToPipe(), nil
	}
	first, keys := c.FirstKey, c.Keys
	if keys == 0 && strings.EqualFold(name, "SPUBLISH") && len(words) > 1 {
		first, keys = 1, 1
	}
	keyed := keys > 0 && first > 0 && first < len(words)
	var cmd rueidis.Completed
	if keyed {
		cmd = b.Arbitrary(words[:first]...).Keys(words[first]).Args(words[first+1:]...).Build()
	} else {
		cmd = b.Arbitrary(words...).Build()
	}
	if pin != "" && (all || !keyed) {
		cmd = cmd.SetSlot(pin)
	}
	return cmd.ToPipe(), nil
}

// argString formats a word of a command as driver.Command.StringArgs does.
func argString(a any) string {
	if s, ok := a.(string); ok { // a key: always a string
		return s
	}
	return driver.Command{Args: []any{a}}.StringArgs()[0]
}

// Dedicated lends a connection of rueidis's pool of key's node (rueidis's
// Dedicate; on a cluster every command sent on it carries key's slot, so
// the first one takes it to key's master). A connection on which a round
// trip failed is closed, not given back: its state (a WATCH, a MULTI) is
// unknown.
//
// Unlike Do and Pipeline, it runs on a goroutine of its own when ctx can
// end, and returns an *errs.Late when ctx ends first, whose Done closes
// when fn has returned: rueidis's Dedicate takes no ctx (it may dial, and
// wait for the server's answer to its HELLO, while the server stalls),
// and closing a connection whose call was given up on would settle that
// call while its bytes may still reach the server. The commands fn sends
// are not cut short by ctx (conn), so fn returns once they are settled.
// Only a WAIT after a write (dlock.WithReplicaSync) and the script-free
// mode come here.
func (d *libDriver) Dedicated(ctx context.Context, key string, fn func(driver.Conn) error) error {
	if ctx.Done() == nil {
		return d.dedicated(key, fn)
	}
	return apart(ctx, &d.redial, func(context.Context) error { return d.dedicated(key, fn) },
		func(err error) error { return err }, func(error) bool { return false })
}

func (d *libDriver) dedicated(key string, fn func(driver.Conn) error) error {
	dc, release := d.client.Dedicate()
	c := &conn{dc: dc, cluster: d.cluster, key: key}
	defer func() {
		if c.broken {
			dc.Close()
		} else {
			release()
		}
	}()
	return fn(c)
}

// conn is the driver.Conn of a dedicated client. fn uses it from one
// goroutine at a time.
type conn struct {
	dc      rueidis.DedicatedClient
	cluster bool
	key     string
	broken  bool // a round trip failed
}

// Pipeline sends cmds with ctx's values, not its end (Dedicated bounds the
// call).
func (c *conn) Pipeline(ctx context.Context, cmds []driver.Command) []driver.Reply {
	pin := ""
	if c.cluster {
		pin = c.key
	}
	out := pipeline(context.WithoutCancel(ctx), c.dc, cmds, false, pin, nil)
	for _, r := range out {
		if r.Err != nil && !isReply(r.Err) {
			c.broken = true
		}
	}
	return out
}

// isReply reports whether err is the server's error reply.
func isReply(err error) bool {
	_, ok := errors.AsType[*driver.ErrorReply](err)
	return ok
}

func (d *libDriver) NodeOf(ctx context.Context, key string) (string, error) {
	if !d.cluster {
		return "", errors.ErrUnsupported
	}
	return d.slots.masterOf(ctx, d.client, keyslot.Of(key))
}

// Masters returns a driver of each master that serves slots (rueidis's
// Nodes has the replicas too).
func (d *libDriver) Masters(ctx context.Context) ([]driver.Driver, error) {
	if !d.cluster {
		return []driver.Driver{d}, nil
	}
	addrs, err := d.slots.masters(ctx, d.client)
	if err != nil {
		return nil, err
	}
	nodes := d.client.Nodes()
	out := make([]driver.Driver, 0, len(addrs))
	for _, a := range addrs {
		n := nodes[a]
		if n == nil {
			return nil, fmt.Errorf("rueidisdlock: master %s is not among the client's nodes", a)
		}
		out = append(out, &libDriver{client: n, name: d.name, settle: newSettler(n, false)})
	}
	return out, nil
}

// Refresh marks the slot map stale: the next NodeOf or Masters reads it
// again. (rueidis refreshes its own map when a reply says it moved.)
func (d *libDriver) Refresh() {
	if d.cluster {
		d.slots.invalidate()
	}
}

// reply is the neutral reply of a rueidis result.
func reply(r rueidis.RedisResult) driver.Reply {
	if err := r.NonRedisError(); err != nil {
		return driver.Reply{Err: err}
	}
	m, _ := r.ToMessage()
	switch v := value(&m).(type) {
	case error:
		return driver.Reply{Err: v}
	default:
		return driver.Reply{Val: v}
	}
}

// value turns a rueidis message into a neutral value: nil, int64, string,
// float64 (a RESP3 double), bool (a RESP3 boolean), []any (an array or a
// set; a map as its keys and values in turn) or an *driver.ErrorReply.
func value(m *rueidis.RedisMessage) any {
	if err := m.Error(); err != nil {
		if rueidis.IsRedisNil(err) {
			return nil
		}
		return &driver.ErrorReply{Err: err}
	}
	switch {
	case m.IsString():
		s, _ := m.ToString()
		return s
	case m.IsInt64():
		n, _ := m.ToInt64()
		return n
	case m.IsArray():
		vs, _ := m.ToArray()
		out := make([]any, len(vs))
		for i := range vs {
			out[i] = value(&vs[i])
		}
		return out
	case m.IsMap():
		kv, _ := m.AsMap()
		out := make([]any, 0, 2*len(kv))
		for k, v := range kv {
			out = append(out, k, value(&v))
		}
		return out
	case m.IsFloat64():
		f, _ := m.ToFloat64()
		return f
	case m.IsBool():
		b, _ := m.ToBool()
		return b
	}
	// A verbatim string ("txt:" and the text, as RESP3's INFO) or a big
	// number.
	v, err := m.ToAny()
	if err != nil {
		return err // not a server's error: a type rueidis cannot read
	}
	if s, ok := v.(string); ok && len(s) >= 4 && s[3] == ':' {
		return s[4:]
	}
	return v
}
