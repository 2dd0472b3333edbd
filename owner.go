package dlock

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// A Client records who it is (host, pid, program, label, start) under
// <prefix>:client:<id>, with a TTL, when it first holds or waits, and again
// when half that TTL has passed; Close deletes it. Inspectors (inspect.go,
// the CLI) show it beside the holds whose tokens carry the Client's id.

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
	if cfg.noOwner {
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
	args := append([]any{ownerTTL.Milliseconds()}, o.fields...)
	if c.be.everywhere(ctx, call{ownerScript, []string{ownerKey(c.prefix, c.id)}, args, nil}) != nil {
		o.written.Store(0)
	}
}

// forget deletes the Client's record (Close).
func (c *Client) forget() {
	if c.owner.off {
		return
	}
	ctx, cancel := bounded(context.Background())
	defer cancel()
	_ = c.be.everywhere(ctx, call{ownerScript, []string{ownerKey(c.prefix, c.id)}, []any{0}, nil})
}
