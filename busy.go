package dlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/protocol"
)

// Who holds it. An acquire refused (a TryLock that found the lock held, a
// Lock whose ctx ended while it waited) says who holds the lock, through
// a *BusyError: one read of the lock (as Inspect reads it: its hash, its
// holders' fences, labels, since and TTLs, and their Clients' owner
// records) that follows the refusal only. The uncontended path, and a
// waiting Lock's attempts, read nothing more: the read is made once, when
// the acquire has already failed.

// busyGrace bounds the read of a Lock whose ctx ended: it is made after
// the end, as the acquire's undo is (hold.Graced), within this much more.
const busyGrace = 10 * time.Millisecond

// BusyError is the error of an acquire refused because another owner
// holds the lock: a TryLock (TryRLock, TryAcquire) that found it held, or
// a Lock (RLock, Acquire, Campaign, LockAll) whose ctx ended while it
// waited. errors.Is(err, ErrNotObtained) holds for it, and, for a wait
// cut short, errors.Is(err, ctx.Err()) as well; errors.As(err, &be) with
// a be of type *BusyError gives who held the lock.
//
// Holder is read once the acquire has been refused (no read is made on
// the uncontended path nor while a Lock waits): for a TryLock just after
// its refusal, within its ctx; for a Lock whose ctx ended, after that end,
// within a short grace (10 ms) — so a holder that the server changed in
// between may be named, and when the server does not answer in time
// Holder is nil (and Owner may be nil when the Client's owner record
// could not be read, or was never written: WithoutOwnerRecord). Holder is
// nil too when nobody held the lock by then (it was freed, or kept for a
// waiter ahead in the queue) and on a quorum Client (NewQuorum), whose
// nodes are not inspected. A Client WithoutScripts names the holder's
// token, TTL and owner: its plain lock keeps no fence, since or label.
type BusyError struct {
	Kind Kind   // the kind of lock
	Name string // the lock refused (for a LockAll, the part that was held)
	// Holder is the holder that refused the acquire: for an RWMutex's
	// writer refused by readers, the first of them (Holders has them
	// all); for a Semaphore, the holder that has held longest.
	Holder *Holder
	// Holders are all the lock's holders as read (the caller's own, a
	// read inside its write hold, left out), first taken first.
	Holders []Holder
	err     error
}

// Error says what the acquire's error says, and who holds the lock.
func (e *BusyError) Error() string {
	if e.Holder == nil {
		return e.err.Error()
	}
	var b strings.Builder
	b.WriteString(e.err.Error())
	b.WriteString(" (held by ")
	describeHolder(&b, e.Holder)
	if n := len(e.Holders) - 1; n > 0 {
		fmt.Fprintf(&b, ", and %d more", n)
	}
	b.WriteString(")")
	return b.String()
}

// describeHolder writes a holder's label, owner and fence, concisely.
func describeHolder(b *strings.Builder, h *Holder) {
	sep := ""
	if h.Label != "" {
		b.WriteString(strconv.Quote(h.Label))
		sep = " "
	}
	if o := h.Owner; o != nil {
		b.WriteString(sep)
		fmt.Fprintf(b, "%s pid %d", o.Host, o.PID)
		if o.Program != "" {
			b.WriteString(" " + o.Program)
		}
		if o.Label != "" {
			b.WriteString(" [" + o.Label + "]")
		}
		sep = " "
	}
	if h.Fence != 0 {
		fmt.Fprintf(b, "%sfence %d", sep, h.Fence)
		sep = " "
	}
	if sep == "" {
		b.WriteString("token " + h.Token)
	}
}

// Unwrap returns the acquire's error: it matches ErrNotObtained, and a
// wait's ctx error when the wait was cut short.
func (e *BusyError) Unwrap() error { return e.err }

// Is reports whether target is ErrNotObtained.
func (e *BusyError) Is(target error) bool { return target == ErrNotObtained }

// kindOfWhat maps a primitive (request.what) to the kind Inspect reads.
func kindOfWhat(what string) Kind {
	switch what {
	case "RWMutex":
		return KindRWMutex
	case "Semaphore":
		return KindSemaphore
	case "Election":
		return KindElection
	}
	return KindMutex
}

// busy turns err, an acquire's refusal on lock name of kind kd by token,
// into a *BusyError naming who holds the lock; any other error, and an
// error that already is one (a LockAll's part), comes back as it is.
// side is an RWMutex request's ("read" or "write"): the holders that
// refuse it are the other side's (a reader is refused by a writer; a
// writer by readers, or a writer).
func (c *Client) busy(ctx context.Context, kd Kind, name, token string, err error) error {
	if !errors.Is(err, ErrNotObtained) || c.rdb == nil {
		return err
	}
	if be := (*BusyError)(nil); errors.As(err, &be) {
		return err
	}
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), busyGrace)
		defer cancel()
	}
	be := &BusyError{Kind: kd, Name: name, err: err}
	info, ierr := c.Inspect(ctx, kd, name)
	if ierr != nil {
		return be
	}
	for _, h := range info.Holders {
		if h.Token != token {
			be.Holders = append(be.Holders, h)
		}
	}
	if len(be.Holders) > 0 {
		be.Holder = &be.Holders[0]
	}
	return be
}

// labels reports whether the Client records labels: one deployment with
// scripts (not WithoutScripts, not a quorum).
func (c *Client) labels() bool { return c.rdb != nil && c.caps.All }

// label records label with the hold of token on k (label.lua), after its
// grant. A failure is logged, not returned: the lease is held all the
// same, without its label.
func (c *Client) label(ctx context.Context, k *protocol.Keys, token, label string) {
	if label == "" || !c.labels() {
		return
	}
	if err := c.be.Run(ctx, protocol.LabelArgs{Token: token, Label: label}.Call(k)).Err; err != nil {
		c.tel.Log.Info("dlock: a hold's label was not recorded", "lock", k.Name, "err", err)
	}
}
