package dlock

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/protocol"
)

// A Client records who it is (host, pid, program, label, start) under
// <prefix>:client:<id>, with a TTL, when it first holds or waits, and again
// when half that TTL has passed; Close deletes it. Inspectors (inspect.go,
// the CLI) and an Election's Leader and Observe show it beside the holds
// whose tokens carry the Client's id. The record is optional: an ACL user
// that may not use <prefix>:client:* (granted only its locks' keys) works
// all the same, shown without its Owner, and is told so once.

// ownerTTL is how long a Client's record lives; it is written again at
// the first acquire after half of it has passed, and deleted by Close.
const ownerTTL = 24 * time.Hour

// owners is a Client's record of itself.
type owners struct {
	off     bool
	fields  []any
	written atomic.Int64 // when the record was last written (unix ns); 0: not
}

func newOwners(cfg clientConfig) *owners {
	if cfg.noOwner || cfg.noScripts {
		// WithoutScripts writes none: the record is a script call on
		// every node (owner.lua), which the script-free backend cannot run.
		return &owners{off: true}
	}
	host, _ := os.Hostname()
	prog := filepath.Base(os.Args[0])
	return &owners{fields: []any{"host", host, "pid", os.Getpid(), "program", prog,
		"label", cfg.label, "started", time.Now().UnixMilli()}}
}

// ownerKey names a Client's record.
func ownerKey(prefix, id string) string { return prefix + ":client:" + id }

// announce records who the Client is when it takes a hold or waits and
// its record is missing or half its life old. It costs one call, rarely,
// within the caller's ctx (a short ctx is not stretched for it: a record
// that could not be written is tried again next time).
func (c *Client) announce(ctx context.Context) {
	o := c.owner
	if o.off {
		return
	}
	now, last := time.Now().UnixNano(), o.written.Load()
	if now-last <= int64(ownerTTL/2) || !o.written.CompareAndSwap(last, now) {
		return // written lately, or being written by another caller
	}
	err := c.be.Everywhere(ctx, protocol.OwnerArgs{TTL: ownerTTL.Milliseconds(), Fields: o.fields}.Call(ownerKey(c.prefix, c.id)))
	switch {
	case noPerm(err):
		// An ACL user granted only its locks' keys: the record is
		// optional, so it is not tried again at every acquire (only when
		// half its life has passed, as if written).
		c.ownersRefused(err)
	case err != nil:
		o.written.Store(0)
	}
}

// noPerm reports whether err is the server refusing a key or command to
// the ACL user (a NOPERM reply).
func noPerm(err error) bool {
	return err != nil && isReply(err) && strings.Contains(err.Error(), "NOPERM")
}

// ownersRefused says once that the ACL user may not read or write the
// owner records: a user granted exactly its locks' keys (an election's,
// say) works, but holders and leaders are shown without their Owner.
func (c *Client) ownersRefused(err error) {
	c.dep.warnOnce("owners", "dlock: the ACL user may not use the owner records: locks work, but holders and leaders "+
		"are shown without who they are; grant ~"+c.prefix+":client:* to show them", "err", err)
}

// forget deletes the Client's record (Close).
func (c *Client) forget() {
	if c.owner.off {
		return
	}
	ctx, cancel := bounded(context.Background())
	defer cancel()
	_ = c.be.Everywhere(ctx, protocol.OwnerArgs{TTL: 0}.Call(ownerKey(c.prefix, c.id)))
}
