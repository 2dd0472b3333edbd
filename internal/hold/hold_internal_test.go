package hold

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/goredis"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/telemetry"
)

// An Extend given up on, which may still set the lease to d on the server
// (a shorter lease, say), caps every confirmation of a command placed
// before it in the hold's sequence — such a command may run first, and the
// late Extend after it — and none of a command placed after it: once that
// has run, the server refuses the late Extend (doc.go, "Late commands").
func TestUnsureExtendCapsEarlierCommandsOnly(t *testing.T) {
	c := testKeeper(t)
	const short, long = 300 * time.Millisecond, time.Minute
	t0 := time.Now()
	h := newHold(c, Spec{Keys: &protocol.Keys{Name: "x"}, What: "Mutex", Ops: ordered{}, Token: "tok", Fence: 1, Cfg: backend.LockConfig{TTL: long, Renew: true}, Start: t0})
	h.mayHaveSet(t0, short, 2, make(chan struct{}))
	h.mu.Lock()
	defer h.mu.Unlock()
	if limit := t0.Add(short); fromMono(h.deadline).After(limit) {
		t.Fatalf("after the unsure Extend the deadline is %v past what the server may give", fromMono(h.deadline).Sub(limit))
	}

	// A renewal placed before the Extend (1), answering after it.
	t1 := t0.Add(10 * time.Millisecond)
	h.deadline = longAgo
	h.confirmed(t1, long, 1)
	if limit := t1.Add(short); fromMono(h.deadline).After(limit) {
		t.Fatalf("a confirmation placed before a pending Extend counted %v past it", fromMono(h.deadline).Sub(limit))
	}

	// A command placed after it (3) has run: it counts in full.
	t2 := time.Now().Add(time.Millisecond)
	h.confirmed(t2, long, 3)
	if want := t2.Add(long - c.drift.Of(long)); fromMono(h.deadline).Before(want) {
		t.Fatalf("a confirmation placed after the late Extend still capped: deadline %v short", want.Sub(fromMono(h.deadline)))
	}
	if len(h.unsures()) != 0 {
		t.Fatalf("%d unsure Extends kept after a later command ran", len(h.unsures()))
	}
}

// Without scripts the server keeps no hold sequence: an Extend given up on
// caps every confirmation sent before the client library was seen done
// with it, whatever its place, and none sent after.
func TestUnsureExtendWithoutScriptsCapsUntilDone(t *testing.T) {
	c := testKeeper(t)
	const short, long = 300 * time.Millisecond, time.Minute
	t0 := time.Now()
	h := newHold(c, Spec{Keys: &protocol.Keys{Name: "x"}, What: "Mutex", Ops: backend.PlainOps(nil, nil), Token: "tok", Fence: 1, Cfg: backend.LockConfig{TTL: long, Renew: true}, Start: t0})
	done := make(chan struct{})
	h.mayHaveSet(t0, short, 2, done)
	h.mu.Lock()
	defer h.mu.Unlock()
	t1 := t0.Add(10 * time.Millisecond)
	h.deadline = longAgo
	h.confirmed(t1, long, 3) // a later place, but the server does not order it
	if limit := t1.Add(short); fromMono(h.deadline).After(limit) {
		t.Fatalf("a confirmation sent while the Extend could still run counted %v past it", fromMono(h.deadline).Sub(limit))
	}
	close(done)
	h.confirmed(t1, long, 4) // sees it done
	t2 := time.Now().Add(time.Millisecond)
	h.confirmed(t2, long, 5)
	if want := t2.Add(long - c.drift.Of(long)); fromMono(h.deadline).Before(want) {
		t.Fatalf("a confirmation sent after the Extend was done still capped: deadline %v short", want.Sub(fromMono(h.deadline)))
	}
	if len(h.unsures()) != 0 {
		t.Fatalf("%d unsure Extends kept after they were done and superseded", len(h.unsures()))
	}
}

// ordered is the HoldOps of a protocol whose server keeps the hold's
// sequence (scripts); none of its calls is made here.
type ordered struct{ backend.HoldOps }

func (ordered) Ordered() bool { return true }

// testKeeper is a Keeper on a redis-server of the test's own, closed with
// the test.
func testKeeper(t *testing.T) *Keeper {
	t.Helper()
	s := redistest.StartT(t, redistest.Options{})
	rdb := s.Client()
	life, cancel := context.WithCancel(context.Background())
	c := NewKeeper(Env{Backend: backend.NewSingle(goredis.New(rdb), false, backend.ReplicaSync{}), Tel: telemetry.New(telemetry.Config{}),
		Life: life})
	t.Cleanup(func() {
		cancel()
		c.Close()
		_ = rdb.Close()
	})
	return c
}

// A hold ends in two steps: the hold first (under its mu), then each of
// its leases is told, outside the mu (their callbacks may run user code).
// Between the two a lease's Err must already see the end: a goroutine that
// reads Err as the watchdog ends the hold (both wake when a stopped
// process resumes) must not be told the lock is held after its deadline.
// The 10-minute torture found this: a reader SIGSTOPped past its TTL read
// Err() == nil after resuming, while a writer held the lock. (The root's
// TestSetErrSeesAPartsEndBeforeItIsTold: the same for a set.)
func TestErrSeesAnEndBeforeItsLeasesAreTold(t *testing.T) {
	c := testKeeper(t)
	h := newHold(c, Spec{Keys: &protocol.Keys{Name: "a"}, What: "Mutex", Ops: ordered{}, Token: "tok-a", Fence: 1,
		Cfg: backend.LockConfig{TTL: time.Minute}, Start: time.Now()})
	var e End
	if err := h.Attach(&e); err != nil {
		t.Fatal(err)
	}
	// The hold has ended; its lease is not told yet.
	h.mu.Lock()
	h.err = lost(reasonDeadline, "a", "test")
	h.mu.Unlock()
	if err := h.leaseErr(&e); !errors.Is(err, errs.LeaseLost) {
		t.Fatalf("a lease's Err = %v after its hold ended, want errs.LeaseLost", err)
	}
	select {
	case <-e.Done():
	default:
		t.Fatal("Err reported the end but Done is still open")
	}
}

// An acquire whose ctx ends while its Client closes leaves its undo's last
// try to a goroutine of its own, bounded by cleanupTimeout: the caller
// returns at once, not when the try does. (The torture found it, seed
// 545246989 on rueidis: a Lock with a 200 ms ctx returned 936 ms after
// its deadline, while a Close ran on a paused server.)
func TestUndoAfterCloseLeavesTheCallerFree(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	rdb := s.Client()
	defer rdb.Close()
	life, cancel := context.WithCancel(context.Background())
	c := NewKeeper(Env{Backend: backend.NewSingle(goredis.New(rdb), false, backend.ReplicaSync{}), Tel: telemetry.New(telemetry.Config{}),
		Life: life})
	cancel()
	c.Close()
	release, tried := make(chan struct{}), make(chan struct{})
	var ended atomic.Bool
	c.UndoLater(nil, time.Second, func(ctx context.Context) error {
		defer close(tried)
		select { // a server that does not answer: the try ends with its ctx, or when the test lets it
		case <-release:
		case <-ctx.Done():
		}
		ended.Store(true)
		return nil
	})
	if ended.Load() {
		t.Error("UndoLater made its last try on the caller's goroutine, after Close: the caller waited for it")
	}
	close(release)
	<-tried
}
