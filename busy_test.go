package dlock_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// busyOf returns err's *BusyError, failing the test when there is none
// or when err does not match ErrNotObtained.
func busyOf(t *testing.T, err error) *dlock.BusyError {
	t.Helper()
	if !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("err = %v; want one matching ErrNotObtained", err)
	}
	var be *dlock.BusyError
	if !errors.As(err, &be) {
		t.Fatalf("err = %v (%T); want a *BusyError", err, err)
	}
	return be
}

// holdOf is what a holder's hold is known by.
type holdOf struct {
	token string
	fence int64
}

func leaseHold(l *dlock.Lease) holdOf { return holdOf{l.Token(), l.Fence()} }

// checkHolder checks that be names the hold of held, taken with label by
// a Client whose owner record says ownerLabel.
func checkHolder(t *testing.T, be *dlock.BusyError, name string, held holdOf, label, ownerLabel string) {
	t.Helper()
	if be.Name != name {
		t.Errorf("BusyError.Name = %q; want %q", be.Name, name)
	}
	h := be.Holder
	if h == nil {
		t.Fatalf("BusyError %v names no holder", be)
	}
	if h.Token != held.token || h.Fence != held.fence || h.Label != label {
		t.Errorf("holder %+v; want token %s, fence %d, label %q", *h, held.token, held.fence, label)
	}
	if h.Since.IsZero() || h.TTL <= 0 {
		t.Errorf("holder since %v, TTL %v; want both", h.Since, h.TTL)
	}
	if o := h.Owner; o == nil || o.Label != ownerLabel || o.PID != os.Getpid() {
		t.Errorf("holder's owner %+v; want label %q, pid %d", o, ownerLabel, os.Getpid())
	}
	if msg := be.Error(); !strings.Contains(msg, label) || !strings.Contains(msg, ownerLabel) {
		t.Errorf("BusyError says %q; want the label %q and the owner %q named", msg, label, ownerLabel)
	}
}

// A refused TryLock of every kind names who holds the lock: its label,
// its owner, its fence.
func TestBusyErrorNamesTheHolder(t *testing.T) {
	ctx := context.Background()
	rdb := newRedis(t, srv)
	a := newClient(t, rdb, dlock.WithOwnerLabel("owner-a"))
	b := newClient(t, rdb)
	label := dlock.WithLabel("job 42")
	leased := func(l *dlock.Lease, err error) (holdOf, func(), error) { // a lease's hold and its release
		if err != nil {
			return holdOf{}, nil, err
		}
		return leaseHold(l), func() { unlock(t, l) }, nil
	}
	cases := []struct {
		name string
		hold func(name string) (holdOf, func(), error)
		try  func(name string) error
	}{
		{"Mutex", func(n string) (holdOf, func(), error) { return leased(a.Mutex(n).Lock(ctx, label)) },
			func(n string) error { _, err := b.Mutex(n).TryLock(ctx); return err }},
		{"FairMutex", func(n string) (holdOf, func(), error) { return leased(a.FairMutex(n).Lock(ctx, label)) },
			func(n string) error { _, err := b.FairMutex(n).TryLock(ctx); return err }},
		{"RWMutex/reader refused by a writer", func(n string) (holdOf, func(), error) { return leased(a.RWMutex(n).Lock(ctx, label)) },
			func(n string) error { _, err := b.RWMutex(n).TryRLock(ctx); return err }},
		{"RWMutex/writer refused by a reader", func(n string) (holdOf, func(), error) { return leased(a.RWMutex(n).RLock(ctx, label)) },
			func(n string) error { _, err := b.RWMutex(n).TryLock(ctx); return err }},
		{"Semaphore", func(n string) (holdOf, func(), error) { return leased(a.Semaphore(n, 1).Acquire(ctx, 1, label)) },
			func(n string) error { _, err := b.Semaphore(n, 1).TryAcquire(ctx, 1); return err }},
		{"Election", func(n string) (holdOf, func(), error) {
			ld, err := a.Election(n, label).Campaign(ctx, "v")
			if err != nil {
				return holdOf{}, nil, err
			}
			info, err := a.Inspect(ctx, dlock.KindElection, n)
			if err != nil || len(info.Holders) != 1 {
				t.Fatalf("Inspect: %+v, %v", info, err)
			}
			return holdOf{info.Holders[0].Token, ld.Fence()}, func() { _ = ld.Resign(ctx) }, nil
		}, func(n string) error {
			cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			_, err := b.Election(n).Campaign(cctx, "w")
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Campaign: %v; want it to match the ctx's error", err)
			}
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := lockName(t)
			held, release, err := tc.hold(name)
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			checkHolder(t, busyOf(t, tc.try(name)), name, held, "job 42", "owner-a")
		})
	}
}

// A Lock whose ctx ends while it waits returns a *BusyError too, which
// still matches ErrNotObtained and the ctx's error.
func TestBusyErrorOfAWaitCutShort(t *testing.T) {
	ctx := context.Background()
	rdb := newRedis(t, srv)
	a, b := newClient(t, rdb, dlock.WithOwnerLabel("owner-a")), newClient(t, rdb)
	name := lockName(t)
	held := mustLock(t, a.Mutex(name), ctx, dlock.WithLabel("the holder"))
	defer unlock(t, held)
	be := cutShort(t, func(wctx context.Context) error {
		_, err := b.Mutex(name).Lock(wctx)
		return err
	})
	checkHolder(t, be, name, leaseHold(held), "the holder", "owner-a")
}

// cutShort runs wait, an acquire that must wait, with a ctx that ends
// after 100 ms: its error must match the ctx's and be a *BusyError. The
// holder is read once the ctx has ended, within busyGrace (10 ms: the
// call still returns within 50 ms of its ctx); on a loaded machine that
// read may not be answered in time, and the error names no holder, as
// documented. So wait runs up to five times, and the first error that
// names a holder is returned (the last one if none does, which
// checkHolder then fails: the holder is never read).
func cutShort(t *testing.T, wait func(ctx context.Context) error) *dlock.BusyError {
	t.Helper()
	var be *dlock.BusyError
	for try := range 5 {
		wctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err := wait(wctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the wait: %v; want it to match context.DeadlineExceeded", err)
		}
		if be = busyOf(t, err); be.Holder != nil {
			return be
		}
		t.Logf("try %d: the holder was not read within the grace: %v", try+1, err)
	}
	return be
}

// A LockAll whose ctx ends names the part that was held, and its holder.
func TestBusyErrorOfLockAll(t *testing.T) {
	ctx := context.Background()
	rdb := newRedis(t, srv)
	a, b := newClient(t, rdb, dlock.WithOwnerLabel("owner-a")), newClient(t, rdb)
	base := lockName(t)
	for _, oneScript := range []bool{true, false} {
		names := []string{base + "/1", base + "/2", base + "/3"}
		busy := names[1]
		held := mustLock(t, a.Mutex(busy), ctx, dlock.WithLabel("part two"))
		lockers := []dlock.Locker{b.Mutex(names[0]), b.Mutex(names[1]), b.Mutex(names[2])}
		if !oneScript { // a mix takes its parts one by one
			lockers[2] = b.FairMutex(names[2])
		}
		be := cutShort(t, func(wctx context.Context) error {
			_, err := dlock.LockAll(wctx, lockers...)
			return err
		})
		checkHolder(t, be, busy, leaseHold(held), "part two", "owner-a")
		unlock(t, held)
		base += "x"
	}
}

// A Semaphore's and an RWMutex's refusals name every holder, the first
// taken first.
func TestBusyErrorNamesEveryHolder(t *testing.T) {
	ctx := context.Background()
	rdb := newRedis(t, srv)
	a, b := newClient(t, rdb), newClient(t, rdb)
	name := lockName(t)
	s := a.Semaphore(name, 2)
	p1, err := s.Acquire(ctx, 1, dlock.WithLabel("first"))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock(t, p1)
	p2, err := s.Acquire(ctx, 1, dlock.WithLabel("second"))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock(t, p2)
	_, err = b.Semaphore(name, 2).TryAcquire(ctx, 1)
	be := busyOf(t, err)
	var labels []string
	for _, h := range be.Holders {
		labels = append(labels, h.Label)
	}
	slices.Sort(labels)
	if !slices.Equal(labels, []string{"first", "second"}) || be.Holder == nil || be.Holder.Label != be.Holders[0].Label {
		t.Fatalf("holders %q, holder %+v; want both labels, the first named", labels, be.Holder)
	}
	if !strings.Contains(be.Error(), "and 1 more") {
		t.Errorf("BusyError says %q; want the other holder counted", be.Error())
	}
}

// A label is any bytes up to MaxLabel: a longer one is refused before
// anything is taken.
func TestLabelBound(t *testing.T) {
	ctx := context.Background()
	c := client(t)
	name := lockName(t)
	long := strings.Repeat("x", dlock.MaxLabel+1)
	if _, err := c.Mutex(name).Lock(ctx, dlock.WithLabel(long)); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Fatalf("Lock with a label of %d bytes: %v; want ErrInvalidArgument", len(long), err)
	}
	if info, err := c.Inspect(ctx, dlock.KindMutex, name); err != nil || info.Held {
		t.Fatalf("after the refusal: %+v, %v; want the lock free", info, err)
	}
	raw := "\x00\xff{}\n" + strings.Repeat("é", (dlock.MaxLabel-5)/2)
	l := mustLock(t, c.Mutex(name), ctx, dlock.WithLabel(raw))
	defer unlock(t, l)
	info, err := c.Inspect(ctx, dlock.KindMutex, name)
	if err != nil || len(info.Holders) != 1 || info.Holders[0].Label != raw {
		t.Fatalf("Inspect: %+v, %v; want the label %q", info, err, raw)
	}
	// a re-entry keeps the hold's label
	inner := mustLock(t, c.Mutex(name), l.Context(ctx), dlock.WithLabel("inner"))
	if info, _ := c.Inspect(ctx, dlock.KindMutex, name); info.Holders[0].Label != raw {
		t.Errorf("after a re-entry the label is %q; want the hold's %q", info.Holders[0].Label, raw)
	}
	unlock(t, inner)
}

// A labelled waiter of a FairMutex takes the lock kept for it and records
// its own label (a release that hands the lock over does not know it).
func TestLabelOfAWaiterHandedTheLock(t *testing.T) {
	ctx := context.Background()
	rdb := newRedis(t, srv)
	a, b := newClient(t, rdb), newClient(t, rdb)
	name := lockName(t)
	held := mustLock(t, a.FairMutex(name), ctx, dlock.WithLabel("first"))
	var wg sync.WaitGroup
	var got *dlock.Lease
	var err error
	wg.Go(func() { got, err = b.FairMutex(name).Lock(ctx, dlock.WithLabel("second")) })
	waitFor(t, "the waiter's place", func() bool {
		info, ierr := a.Inspect(ctx, dlock.KindMutex, name)
		return ierr == nil && len(info.Waiters) == 1
	})
	unlock(t, held)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	defer unlock(t, got)
	info, ierr := a.Inspect(ctx, dlock.KindMutex, name)
	if ierr != nil || len(info.Holders) != 1 || info.Holders[0].Label != "second" {
		t.Fatalf("Inspect: %+v, %v; want the waiter's label", info, ierr)
	}
}

// labelFields returns the 'l:' fields of key's hash.
func labelFields(t *testing.T, rdb *redis.Client, key string) []string {
	t.Helper()
	fields, err := lockFields(context.Background(), rdb, key)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for f := range fields {
		if strings.HasPrefix(f, "l:") {
			out = append(out, f)
		}
	}
	return out
}

// A hold's label goes with the hold, whatever ends it: a release, a
// ForceUnlock, a reader's or a permit's own expiry while another holder
// keeps the key.
func TestLabelLeavesWithTheHold(t *testing.T) {
	ctx := context.Background()
	rdb := newRedis(t, srv)
	c := newClient(t, rdb)
	lbl := dlock.WithLabel("gone with it")
	name := lockName(t)
	k := func(suffix string) string { return keysOf(name).Lock + suffix }

	// released: the key is gone (nothing else is in it)
	unlock(t, mustLock(t, c.Mutex(name), ctx, lbl))
	unlock(t, mustLock(t, c.RWMutex(name), ctx, lbl))
	unlock(t, mustLock(t, c.RWMutex(name).RLocker(), ctx, lbl))
	p, err := c.Semaphore(name, 2).Acquire(ctx, 1, lbl)
	if err != nil {
		t.Fatal(err)
	}
	unlock(t, p)
	ld, err := c.Election(name, lbl).Campaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{k(""), k(":rw"), k(":sem"), k(":election")} {
		if n, err := rdb.Exists(ctx, key).Result(); err != nil || n != 0 {
			t.Errorf("%s left after its labelled hold's release (%d, %v): %v", key, n, err, labelFields(t, rdb, key))
		}
	}

	// released while another holder keeps the key: no label left
	keep := mustLock(t, c.RWMutex(name).RLocker(), ctx)
	unlock(t, mustLock(t, c.RWMutex(name).RLocker(), ctx, lbl))
	if ls := labelFields(t, rdb, k(":rw")); len(ls) != 0 {
		t.Errorf("a released reader left %v", ls)
	}
	unlock(t, keep)
	// a labelled writer released while a read inside it holds on
	w := mustLock(t, c.RWMutex(name), ctx, lbl)
	inner := mustLock(t, c.RWMutex(name).RLocker(), w.Context(ctx))
	unlock(t, w)
	if ls := labelFields(t, rdb, k(":rw")); len(ls) != 0 {
		t.Errorf("a released writer left %v beside the read inside it", ls)
	}
	unlock(t, inner)
	keep = mustLock(t, c.RWMutex(name).RLocker(), ctx)
	// a reader's own expiry: dropped by the next script that reads the lock
	short := mustLock(t, c.RWMutex(name).RLocker(), ctx, lbl, dlock.WithLease(20*time.Millisecond))
	<-short.Done()
	time.Sleep(5 * time.Millisecond) // past the server's expiry too (the lease's local deadline comes first)
	unlock(t, mustLock(t, c.RWMutex(name).RLocker(), ctx))
	if ls := labelFields(t, rdb, k(":rw")); len(ls) != 0 {
		t.Errorf("an expired reader left %v", ls)
	}
	unlock(t, keep)

	s := c.Semaphore(name, 3)
	sk, err := s.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := s.Acquire(ctx, 1, lbl)
	if err != nil {
		t.Fatal(err)
	}
	unlock(t, sp)
	if ls := labelFields(t, rdb, k(":sem")); len(ls) != 0 {
		t.Errorf("a released permit left %v", ls)
	}
	sshort, err := s.Acquire(ctx, 1, lbl, dlock.WithLease(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	<-sshort.Done()
	time.Sleep(5 * time.Millisecond)
	sp, err = s.TryAcquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	unlock(t, sp)
	if ls := labelFields(t, rdb, k(":sem")); len(ls) != 0 {
		t.Errorf("an expired permit left %v", ls)
	}
	unlock(t, sk)

	// forced: the key goes
	mustLock(t, c.Mutex(name), ctx, lbl)
	if _, err := c.ForceUnlock(ctx, dlock.KindMutex, name); err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.Exists(ctx, k("")).Result(); n != 0 {
		t.Errorf("a forced labelled hold left %v", labelFields(t, rdb, k("")))
	}
}

// Refusals in a row read the holder's owner record once (it is written
// once per Client): the second reads the lock alone.
func TestBusyErrorReadsAnOwnerOnce(t *testing.T) {
	ctx := context.Background()
	holder := client(t, dlock.WithOwnerLabel("owner-a"))
	c, rec := countedClient(t)
	name := lockName(t)
	held := mustLock(t, holder.Mutex(name), ctx)
	defer unlock(t, held)
	owners := func() int {
		n := 0
		for _, rt := range rec.take() {
			for _, cmd := range rt {
				if cmd == "hgetall" || cmd == "get" { // the owner's record; the lock's hold
					n++
				}
			}
		}
		return n
	}
	// the Client's first-acquire checks done
	unlock(t, mustLock(t, c.Mutex(lockName(t)), ctx))
	for i, want := range []int{2, 1} { // the lock's hold and the owner's record, then the hold alone
		rec.take()
		_, err := c.Mutex(name).TryLock(ctx)
		be := busyOf(t, err)
		if be.Holder == nil || be.Holder.Owner == nil || be.Holder.Owner.Label != "owner-a" {
			t.Fatalf("refusal %d: holder %+v; want its owner named", i, be.Holder)
		}
		if got := owners(); got != want {
			t.Errorf("refusal %d read %d keys; want %d", i, got, want)
		}
	}
}

// A Client WithoutScripts names what its plain lock keeps: the holder's
// token and TTL (no fence, since, label or owner record there); a quorum Client
// names nobody, but its refusal is a *BusyError all the same.
func TestBusyErrorWithoutScriptsAndOnAQuorum(t *testing.T) {
	ctx := context.Background()
	rdb := newRedis(t, srv)
	a := newClient(t, rdb, dlock.WithoutScripts())
	b := newClient(t, rdb, dlock.WithoutScripts())
	name := lockName(t)
	held := mustLock(t, a.Mutex(name), ctx, dlock.WithLabel("kept nowhere"))
	_, err := b.Mutex(name).TryLock(ctx)
	be := busyOf(t, err)
	if h := be.Holder; h == nil || h.Token != held.Token() || h.TTL <= 0 || h.Label != "" {
		t.Errorf("script-free holder %+v; want its token and TTL", h)
	}
	unlock(t, held)

	_, nodes := quorumNodes(t, 3)
	q1, q2 := quorumClient(t, nodes), quorumClient(t, nodes)
	ql := mustLock(t, q1.Mutex(name), ctx, dlock.WithLabel("kept nowhere"))
	defer unlock(t, ql)
	_, err = q2.Mutex(name).TryLock(ctx)
	if be := busyOf(t, err); be.Holder != nil || be.Name != name {
		t.Errorf("quorum BusyError %+v; want the name and no holder", be)
	}
}
