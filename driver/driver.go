// Package driver is the seam between dlock and a Redis client library:
// the interface a driver implements (Driver, Conn, PubSub) and the neutral
// values it speaks (Command, Reply, Event). The go-redis driver is built
// into dlock (dlock.New); rueidisdlock and valkeydlock bring rueidis and
// valkey-go; drivertest is the conformance suite every driver must pass.
// Users of a built-in driver never import this package.
package driver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Driver is how a dlock Client reaches Redis. A Client speaks to Redis
// only through one; the go-redis driver is what dlock.New uses, and the
// packages rueidisdlock and valkeydlock bring the rueidis and valkey-go
// clients (dlock.NewWithDriver). Tests wrap a Driver to inject faults.
//
// A Driver speaks neutral values: a Command is a command's words, a Reply
// a command's reply. It need not bound its calls by their ctx (a Client
// runs every call within its ctx itself, unless the driver says it
// returns at once when ctx ends: Info.CtxBound), nor batch calls
// from several goroutines (unless Info.AutoPipeline says that it
// does). It must be safe for concurrent use.
type Driver interface {
	// Do runs one command on the node that serves its key (any node
	// when it has none) and returns its reply.
	Do(ctx context.Context, cmd Command) Reply
	// Pipeline sends the commands together and returns one reply per
	// command, in order; on a cluster each goes to the node of its key.
	// A failed round trip is every reply's error.
	Pipeline(ctx context.Context, cmds []Command) []Reply
	// Dedicated runs fn with a connection to the node that serves key
	// (the only node when the deployment is not a cluster) that nobody
	// else uses meanwhile: what fn sends there runs in order, so a WAIT
	// follows the write before it, and WATCH, MULTI and EXEC make a
	// transaction. fn must leave the connection as it found it (UNWATCH
	// after a WATCH that no EXEC followed). A Conn never sends a pipeline
	// again (on another connection, after a lost reply): a MULTI/EXEC
	// sent again would run without the WATCH before it (go-redis's Conn
	// fails the retry of a connection whose read failed; rueidis's
	// dedicated client does not retry once its connection failed).
	Dedicated(ctx context.Context, key string, fn func(Conn) error) error
	// PubSub returns a pub/sub connection to node (an address NodeOf
	// returned; "" for the deployment's own choice: the server, or on a
	// cluster the node of the first channel subscribed). sharded selects
	// SSUBSCRIBE and SUNSUBSCRIBE. events is called, from one goroutine at
	// a time and in order, for every confirmation of a subscription
	// (including those that follow a reconnect, which must resubscribe
	// every channel the connection had), every end of one (Event), and
	// every message; never after Close returns.
	PubSub(node string, sharded bool, events func(Event)) PubSub
	// NodeOf returns the address of the master that serves key's slot on
	// a cluster; elsewhere it returns an error.
	NodeOf(ctx context.Context, key string) (string, error)
	// Masters returns a Driver for each master of a cluster (for SCAN
	// and INFO, which are per node); elsewhere the Driver itself.
	Masters(ctx context.Context) ([]Driver, error)
	// Refresh tells the driver that a call failed in a way that may mean
	// its view of a cluster is stale; it may reload it in the
	// background. It does not block.
	Refresh()
	// Info says what kind of deployment and client this is.
	Info() Info
}

// Info is what a Driver says of itself.
type Info struct {
	// Name names the client library ("go-redis", "rueidis", ...).
	Name string
	// Cluster: the deployment is a Redis Cluster (keys live on the node
	// of their slot; pub/sub is sharded).
	Cluster bool
	// AutoPipeline: the client sends concurrent commands together by
	// itself, so the Client does not batch them.
	AutoPipeline bool
	// CtxBound: every call returns as soon as its ctx ends, and a
	// command whose caller gave up cannot run on the server after a
	// command sent later on the same node (the client keeps one ordered
	// connection per node), unless the call's error says when it is
	// settled (dlock's own connections, whose large pipelines go on a
	// connection of their own; rueidisdlock's and valkeydlock's, whose
	// given-up calls are settled when a PING sent after them on their
	// connection returns). The Client then runs calls on the caller's
	// goroutine.
	CtxBound bool
	// ResendAfter: the client library may send a call again when its
	// reply has not come within this long (go-redis after its
	// ReadTimeout, unless MaxRetries is -1), while the first copy's
	// bytes may still reach the server later, after the second copy
	// ran. A lock whose acquire took this long or more buries its token
	// when it is released (bury.lua), so that a copy landing after the
	// release cannot take it again for nobody. 0: the library never
	// sends a call twice without saying so in the call's Reply
	// (SentTwice), which the acquire path treats as it treats a call
	// that took ResendAfter. A re-send after a reset can come at any time,
	// so a driver whose library re-sends after one must mark the reply;
	// else ResendAfter must be the smallest time it can happen after.
	ResendAfter time.Duration
}

// Conn is a connection that Driver.Dedicated lends.
type Conn interface {
	// Pipeline sends the commands on the connection, in order, and
	// returns one reply per command.
	Pipeline(ctx context.Context, cmds []Command) []Reply
}

// PubSub is a pub/sub connection (see Driver.PubSub).
type PubSub interface {
	// Subscribe asks for the channels' messages; the confirmation comes
	// as an Event.
	Subscribe(ctx context.Context, channels ...string) error
	// Unsubscribe stops the channels' messages.
	Unsubscribe(ctx context.Context, channels ...string) error
	// Close closes the connection; no event is delivered once it returns.
	Close() error
}

// Event is what a pub/sub connection hears: the confirmation of a
// subscription to Channel (Subscribed), its end (Unsubscribed), or a
// message on it (Payload).
type Event struct {
	Channel    string
	Payload    string
	Subscribed bool
	// Unsubscribed: the server ended the subscription to Channel by
	// itself — a sharded channel whose slot moved to another node (a
	// resharding, a failover). The answer to the caller's own Unsubscribe
	// is not told. The driver forgets the channel (a reconnect does not
	// subscribe it again where it no longer lives); the caller subscribes
	// it where it lives now.
	Unsubscribed bool
}

// Command is one Redis command: its words, the command's name first.
// Each word is a string or an int or int64. Keys says which words are
// keys: Args[FirstKey:FirstKey+Keys] (none when Keys is 0); a cluster
// routes the command by them.
type Command struct {
	Args     []any
	FirstKey int
	Keys     int
}

// Reply is a command's reply in neutral values: Err when the server
// replied with an error (then it is, or wraps, an ErrorReply) or the
// round trip failed; else Val, one of nil (a nil reply), int64, string,
// float64, bool or []any of these (a map comes as its keys and values in
// turn).
type Reply struct {
	Val any
	Err error
	// SentTwice: the client library sent the command more than once (again
	// after its connection closed or reset, or its reply did not come in
	// time): an earlier copy may have run, or may still reach the server
	// later, after this one. A driver whose library re-sends sets it on
	// every reply of a call it sent again (it may set it on a call sent
	// once, never leave it unset on one sent twice); the acquire path then
	// takes the call's outcome for a copy's (see Info.ResendAfter).
	SentTwice bool
}

// ErrorReply is an error the server replied with, as opposed to a failure
// to reach it. Drivers return server errors as one, wrapping the client
// library's own error.
type ErrorReply struct{ Err error }

// Error returns the server's error message.
func (e *ErrorReply) Error() string { return e.Err.Error() }

// Unwrap returns the client library's error.
func (e *ErrorReply) Unwrap() error { return e.Err }

// errNil is what a Reply's accessors return for a nil reply.
var errNil = errors.New("dlock: nil reply")

// Int64 returns an integer reply (or a string that holds one).
func (r Reply) Int64() (int64, error) {
	if r.Err != nil {
		return 0, r.Err
	}
	switch v := r.Val.(type) {
	case int64:
		return v, nil
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("dlock: reply %q is not an integer", v)
		}
		return n, nil
	case nil:
		return 0, errNil
	}
	return 0, fmt.Errorf("dlock: reply of type %T is not an integer", r.Val)
}

// Text returns a string reply.
func (r Reply) Text() (string, error) {
	if r.Err != nil {
		return "", r.Err
	}
	switch v := r.Val.(type) {
	case string:
		return v, nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case nil:
		return "", errNil
	}
	return "", fmt.Errorf("dlock: reply of type %T is not a string", r.Val)
}

// Slice returns an array reply.
func (r Reply) Slice() ([]any, error) {
	if r.Err != nil {
		return nil, r.Err
	}
	switch v := r.Val.(type) {
	case []any:
		return v, nil
	case nil:
		return nil, errNil
	}
	return nil, fmt.Errorf("dlock: reply of type %T is not an array", r.Val)
}

// Int64Slice returns an array reply of integers.
func (r Reply) Int64Slice() ([]int64, error) { return r.AppendInt64s(nil) }

// AppendInt64s appends an array reply of integers to dst and returns the
// extended slice (dst, an array on the caller's stack, saves an
// allocation per reply).
func (r Reply) AppendInt64s(dst []int64) ([]int64, error) {
	vs, err := r.Slice()
	if err != nil {
		return nil, err
	}
	if dst == nil {
		dst = make([]int64, 0, len(vs))
	}
	for _, v := range vs {
		n, err := (Reply{Val: v}).Int64()
		if err != nil {
			return nil, err
		}
		dst = append(dst, n)
	}
	return dst, nil
}

// StringArgs returns a command's words as strings: for a driver whose
// client takes strings only.
func (c Command) StringArgs() []string { return c.AppendStringArgs(make([]string, 0, len(c.Args))) }

// AppendStringArgs appends a command's words as strings to dst, as
// StringArgs makes them, and returns the extended slice: for a driver
// that reuses dst once its client has copied the words.
func (c Command) AppendStringArgs(dst []string) []string {
	for _, a := range c.Args {
		dst = append(dst, argString(a))
	}
	return dst
}

// argString formats a word of a command.
func argString(a any) string {
	switch v := a.(type) {
	case string:
		return v
	case int:
		return strconv.Itoa(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case []byte:
		return string(v)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		if v {
			return "1"
		}
		return "0"
	}
	return fmt.Sprint(a)
}
