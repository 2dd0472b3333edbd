package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// observe subscribes to every channel of the server and returns the
// messages published from now on, in the order the server published them.
func observe(t *testing.T) <-chan *redis.Message {
	t.Helper()
	ps := newRedis(t, srv).PSubscribe(context.Background(), "*")
	t.Cleanup(func() { _ = ps.Close() })
	if _, err := ps.Receive(context.Background()); err != nil { // the confirmation
		t.Fatal(err)
	}
	return ps.Channel()
}

// until returns the messages before the one on channel "end", which the
// test publishes last: a barrier, since the server delivers in order. A
// Client's probe of its channel at its first wait (one per Client, not per
// release: "check:-") is left out.
func until(t *testing.T, admin *redis.Client, msgs <-chan *redis.Message) []*redis.Message {
	t.Helper()
	end := "end-" + t.Name()
	if err := admin.Publish(context.Background(), end, "").Err(); err != nil {
		t.Fatal(err)
	}
	var got []*redis.Message
	for m := range msgs {
		if m.Channel == end {
			return got
		}
		if m.Payload != "check:-" {
			got = append(got, m)
		}
	}
	t.Fatal("observer closed")
	return nil
}

// With W processes waiting on one Mutex, each release sends one message,
// to the one process whose waiter goes next, and nothing to the others:
// the server's work per release does not grow with the waiters.
func TestReleaseTellsOneProcess(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	admin := newRedis(t, srv)
	msgs := observe(t)
	const W = 8
	holder := mustLock(t, client(t).Mutex(name), ctx)
	won := make(chan *dlock.Lease, W)
	errs := make(chan error, W)
	for range W {
		m := client(t).Mutex(name) // a Client each, as separate processes
		go func() {
			l, err := m.Lock(ctx)
			if err != nil {
				errs <- err
				return
			}
			won <- l
		}()
	}
	queue := keysOf(name).Lock + ":queue"
	waitFor(t, "every waiter registered", func() bool { return admin.ZCard(ctx, queue).Val() == W })
	unlock(t, holder)
	var order []string
	for range W {
		select {
		case l := <-won:
			order = append(order, l.Token())
			unlock(t, l)
		case err := <-errs:
			t.Fatal(err)
		}
	}
	got := until(t, admin, msgs)
	// One message per release that had a waiter: W releases had one (the
	// holder's and those of the first W-1 winners); the last had none.
	if len(got) != W {
		for _, m := range got {
			t.Logf("%s %q", m.Channel, m.Payload)
		}
		t.Fatalf("%d messages for %d releases with waiters; want one each", len(got), W)
	}
	for i, m := range got {
		// '<client id>:<token>:h<ttl> <fence> <ms>': the lock handed over
		member := strings.Fields(m.Payload)[0]
		if f := strings.Split(member, ":"); len(f) < 2 || f[1] != order[i] {
			t.Errorf("release %d told %q on %s; the next owner was %s", i, m.Payload, m.Channel, order[i])
		}
		client := strings.SplitN(m.Payload, ":", 2)[0]
		if m.Channel != dlock.DefaultPrefix+":wake:"+client {
			t.Errorf("release %d told %q on %s, not on its Client's channel", i, m.Payload, m.Channel)
		}
		// and only that Client listens there
		if n := admin.PubSubNumSub(ctx, m.Channel).Val()[m.Channel]; n != 1 {
			t.Errorf("release %d: %d subscribers to %s; want 1", i, n, m.Channel)
		}
	}
}

// A waiter killed while the lock is kept for it delays the others by the
// rest of its place's life, not by a lease TTL.
func TestDeadWaiterIsSkippedAfterItsPlace(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	admin := newRedis(t, srv)
	k := keysOf(name).Lock
	holder := mustLock(t, client(t).Mutex(name), ctx) // TTL 30 s
	// A waiter of a process since killed, first in line; its place lives
	// one more second.
	now, err := admin.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	const dead = "0badc0de:dead"
	admin.ZAdd(ctx, k+":queue", redis.Z{Score: 1, Member: dead})
	admin.ZAdd(ctx, k+":alive", redis.Z{Score: float64(now.Add(time.Second).UnixMilli()), Member: dead})
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second) // far below the holder's TTL
	defer cancel()
	got := make(chan error, 1)
	m := client(t).Mutex(name, dlock.WithQueueTTL(300*time.Millisecond))
	go func() {
		l, err := m.Lock(wctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	waitFor(t, "the live waiter registered", func() bool { return admin.ZCard(ctx, k+":queue").Val() == 2 })
	unlock(t, holder)
	if who := fieldsOf(t, admin, k)["@next"]; who != dead {
		t.Logf("the lock was kept for %q, not for the dead waiter (it expired already?)", who)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter behind a dead one: %v", err)
	}
}

// A waiter for many permits is served before later small requests: they
// cannot take the permits kept for it (x/sync/semaphore's order).
func TestSemaphoreLargeRequestNotStarved(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	admin := newRedis(t, srv)
	s := client(t).Semaphore(name, 10)
	small := mustAcquire(t, s, 1)
	big := make(chan error, 1)
	go func() {
		l, err := client(t).Semaphore(name, 10).Acquire(ctx, 10)
		if err == nil {
			err = l.Unlock(ctx)
		}
		big <- err
	}()
	queue := "dlock:{" + name + "}:sem:queue"
	waitFor(t, "the large request waiting", func() bool { return admin.ZCard(ctx, queue).Val() == 1 })
	other := client(t).Semaphore(name, 10)
	for range 20 {
		if l, err := other.TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("TryAcquire(1) with 9 free while 10 are awaited: %v, %v", l, err)
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := other.Acquire(sctx, 1); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("Acquire(1) behind the large request: %v", err)
	}
	unlock(t, small)
	if err := <-big; err != nil {
		t.Fatal(err)
	}
}

// Port of x/sync/semaphore's TestAllocCancelDoesntStarve: when the large
// request at the head gives up, the small one behind it proceeds.
func TestSemaphoreAllocCancelDoesntStarve(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	admin := newRedis(t, srv)
	sem := client(t).Semaphore(name, 10)
	one := mustAcquire(t, sem, 1)
	defer unlock(t, one)
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bigDone := make(chan error, 1)
	go func() {
		_, err := client(t).Semaphore(name, 10).Acquire(bctx, 10)
		bigDone <- err
	}()
	queue := "dlock:{" + name + "}:sem:queue"
	waitFor(t, "the large request waiting", func() bool { return admin.ZCard(ctx, queue).Val() == 1 })
	acquired := make(chan error, 1)
	go func() {
		l, err := client(t).Semaphore(name, 10).Acquire(ctx, 1)
		if err == nil {
			err = l.Unlock(ctx)
		}
		acquired <- err
	}()
	waitFor(t, "the small request waiting", func() bool { return admin.ZCard(ctx, queue).Val() == 2 })
	cancel()
	if err := <-bigDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the large request: %v; want context.Canceled", err)
	}
	if err := <-acquired; err != nil {
		t.Fatal(err)
	}
}

// An RWMutex is phase-fair: a writer's release admits the readers that
// wait at that moment, one message each, ahead of the writer that waits
// too; the last of them to leave tells the writer. Nobody else hears of
// it.
func TestRWReleaseTellsWhoMayGo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := lockName(t)
	admin := newRedis(t, srv)
	msgs := observe(t)
	w := mustLock(t, client(t).RWMutex(name), ctx)
	type got struct {
		who string
		l   *dlock.Lease
	}
	won := make(chan got, 4)
	errs := make(chan error, 4)
	wait := func(who string, lock func() (*dlock.Lease, error)) {
		go func() {
			l, err := lock()
			if err != nil {
				errs <- err
				return
			}
			won <- got{who, l}
		}()
	}
	for range 3 {
		rw := client(t).RWMutex(name)
		wait("reader", func() (*dlock.Lease, error) { return rw.RLock(ctx) })
	}
	rqueue := "dlock:{" + name + "}:rw:rqueue"
	waitFor(t, "the readers registered", func() bool { return admin.ZCard(ctx, rqueue).Val() == 3 })
	writer := client(t).RWMutex(name)
	wait("writer", func() (*dlock.Lease, error) { return writer.Lock(ctx) })
	queue := "dlock:{" + name + "}:rw:queue"
	waitFor(t, "the writer registered", func() bool { return admin.ZCard(ctx, queue).Val() == 1 })
	unlock(t, w)
	var order []got
	for range 4 {
		select {
		case g := <-won:
			order = append(order, g)
			unlock(t, g.l) // the last reader's release tells the writer
		case err := <-errs:
			t.Fatal(err)
		}
	}
	if order[3].who != "writer" {
		t.Fatalf("the waiting writer went before a reader that waited at the release")
	}
	ms := until(t, admin, msgs)
	if len(ms) != 4 {
		for _, m := range ms {
			t.Logf("%s %q", m.Channel, m.Payload)
		}
		t.Fatalf("%d messages; want 4: each reader, then the writer", len(ms))
	}
	// The readers are told together, in no particular order.
	told := map[string]bool{}
	for _, m := range ms[:3] {
		told[m.Payload[strings.LastIndex(m.Payload, ":")+1:]] = true
	}
	for _, g := range order[:3] {
		if !told[g.l.Token()] {
			t.Errorf("reader %s was not told; told %v", g.l.Token(), told)
		}
	}
	if !strings.HasSuffix(ms[3].Payload, ":"+order[3].l.Token()) {
		t.Fatalf("the last message %q was not for the writer", ms[3].Payload)
	}
}

// A waiter handed the lock by the release takes it without a round trip
// of its own: the message carries the lock and its fence.
func TestHandOffCostsTheWaiterNothing(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	admin := newRedis(t, srv)
	queue := keysOf(name).Lock + ":queue"
	c, rec := countedClient(t)
	m := c.Mutex(name)
	holder := client(t).Mutex(name)
	var fences []int64
	for round := range 2 { // the first subscribes the Client's channel
		h := mustLock(t, holder, ctx)
		got := make(chan *dlock.Lease, 1)
		go func() { got <- mustLock(t, m, ctx) }()
		waitFor(t, "the waiter registered", func() bool { return admin.ZCard(ctx, queue).Val() == 1 })
		if round == 1 {
			rec.take()
		}
		unlock(t, h)
		l := <-got
		if round == 1 {
			if calls := rec.take(); len(calls) != 0 {
				t.Fatalf("the waiter sent %v after the release; want nothing", calls)
			}
		}
		fences = append(fences, h.Fence(), l.Fence())
		unlock(t, l)
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fences %v: not increasing", fences)
		}
	}
}

// A Lock's first attempt gives up no place when it takes a free lock: it
// has none, unless go-redis sent the call again after losing its reply and
// the first run left one. Such a stale place of the holder's own is
// dropped by its release, which hands the lock to the next waiter — not
// back to the holder, which would pin it until the place expired.
func TestReleaseSkipsItsOwnStalePlace(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	admin := newRedis(t, srv)
	k := keysOf(name).Lock
	c := client(t)
	holder := mustLock(t, c.Mutex(name), ctx) // TTL 30 s
	// The place the holder's lost first run would have left: first in
	// line, alive for 30 s.
	tok := holder.Token()
	stale := tok[:16] + ":" + tok + ":h30000"
	now, err := admin.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	admin.ZAdd(ctx, k+":queue", redis.Z{Score: 1, Member: stale})
	admin.ZAdd(ctx, k+":alive", redis.Z{Score: float64(now.Add(30 * time.Second).UnixMilli()), Member: stale})
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := client(t).Mutex(name).Lock(wctx)
		if err != nil {
			t.Errorf("the waiter: %v", err)
		}
		got <- l
	}()
	waitFor(t, "the waiter registered", func() bool { return admin.ZCard(ctx, k+":queue").Val() == 2 })
	unlock(t, holder)
	// The release handed the lock on at once: the hold is the waiter's.
	if _, mine := fieldsOf(t, admin, k)[tok]; mine {
		t.Errorf("the release handed the lock back to its own stale place")
	}
	if n := admin.ZCard(ctx, k+":queue").Val(); n != 0 {
		t.Errorf("%d places left in the queue; want 0", n)
	}
	if l := <-got; l != nil {
		unlock(t, l)
	}
}
