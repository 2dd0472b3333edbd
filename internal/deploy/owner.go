package deploy

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
// when half that TTL has passed; Close deletes it. Inspectors (the root's
// inspect.go, the CLI) and an Election's Leader and Observe show it beside the holds
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

func newOwners(cfg Config) *owners {
	if cfg.NoOwner {
		// WithoutOwnerInfo, or WithoutScripts, which writes none: the
		// record is a script call on every node (owner.lua), which the
		// script-free backend cannot run.
		return &owners{off: true}
	}
	host, _ := os.Hostname()
	prog := filepath.Base(os.Args[0])
	return &owners{fields: []any{"host", host, "pid", os.Getpid(), "program", prog,
		"label", cfg.Label, "started", time.Now().UnixMilli()}}
}

// OwnerKey names the record of the Client id (under prefix).
func OwnerKey(prefix, id string) string { return prefix + ":client:" + id }

// Announce records who the Client is when it takes a hold or waits and
// its record is missing or half its life old. It costs one call, rarely,
// within the caller's ctx (a short ctx is not stretched for it: a record
// that could not be written is tried again next time).
func (d *Deployment) Announce(ctx context.Context) {
	o := d.owner
	if o.off {
		return
	}
	now, last := time.Now().UnixNano(), o.written.Load()
	if now-last <= int64(ownerTTL/2) || !o.written.CompareAndSwap(last, now) {
		return // written lately, or being written by another caller
	}
	err := d.reach.Everywhere(ctx, protocol.OwnerArgs{TTL: ownerTTL.Milliseconds(), Fields: o.fields}.Call(OwnerKey(d.prefix, d.reach.ID)))
	switch {
	case NoPerm(err):
		// An ACL user granted only its locks' keys: the record is
		// optional, so it is not tried again at every acquire (only when
		// half its life has passed, as if written).
		d.OwnersRefused(err)
	case err != nil:
		o.written.Store(0)
	}
}

// NoPerm reports whether err is the server refusing a key or command to
// the ACL user (a NOPERM reply).
func NoPerm(err error) bool {
	return err != nil && IsReply(err) && strings.Contains(err.Error(), "NOPERM")
}

// OwnersRefused says once that the ACL user may not read or write the
// owner records: a user granted exactly its locks' keys (an election's,
// say) works, but holders and leaders are shown without their Owner.
func (d *Deployment) OwnersRefused(err error) {
	d.warnOnce("owners", "dlock: the ACL user may not use the owner records: locks work, but holders and leaders "+
		"are shown without who they are; grant ~"+d.prefix+":client:* to show them", "err", err)
}

// Forget deletes the Client's record (Close), within ctx.
func (d *Deployment) Forget(ctx context.Context) {
	if d.owner.off {
		return
	}
	_ = d.reach.Everywhere(ctx, protocol.OwnerArgs{TTL: 0}.Call(OwnerKey(d.prefix, d.reach.ID)))
}
