package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// The RWMutex is phase-fair: a wait is measured in the other side's
// phases, not in milliseconds. Every reader and writer gets a fence of its
// own, strictly increasing per lock, so the fences order the grants; a
// wait starts at the fence counter read just before the call. Between
// that and the waiter's own fence:
//
//   - a reader sees at most one write hold begin (the writer that stopped
//     new readers before it came), and
//   - a writer sees at most two read phases begin (the one it waits out,
//     and the one that the writer ahead of it lets in; there are two
//     writers).
//
// The counter is read before the first attempt reaches the server, so
// grants may fall in between that the rule does not count: check is told
// how many (its slack) — one where each worker has a Client and holds for
// a millisecond, two where a dozen workers share a Client (their calls
// queue behind each other's) and hold for no time at all. And a first
// attempt can be late by more than a hold (its goroutine not scheduled,
// under -race on two cores: seen, 3 writes in one reader's wait): a wait
// whose other side was served first by a waiter that called after it (a
// writer after a reader, a reader after a writer), within arrivalSlack,
// had not reached the server before that one's call, since it would have
// gone first; its count starts at that one's counter (see arrived).
const (
	readerMaxWrites = 1
	writerMaxPhases = 2
)

// phaseLog records the grants of one RWMutex by fence and each wait by
// the fence counter before it began.
type phaseLog struct {
	rdb      *redis.Client
	fenceKey string

	mu    sync.Mutex
	write map[int64]bool // fence -> granted to a writer (false: a reader)
	holds map[string]int // grants per worker
	waits []phaseWait
}

type phaseWait struct {
	write    bool
	who      string
	from, to int64         // the fence counter before the call; the fence granted (0: still waiting at the end)
	call     time.Time     // when the wait began (after from was read)
	took     time.Duration // for the log only: nothing is asserted in time
}

// arrivalSlack is how long after its call a waiter's first attempt may
// still reach the server after the other side's later calls. Beyond it a
// wait is counted from its own call: a lock that starves one side must
// still fail.
const arrivalSlack = 100 * time.Millisecond

// arrived returns the fence counter from which w's wait is counted: its
// own, or that of the latest call of the other side made after w's (within
// arrivalSlack) and granted before w — which w would have gone before,
// had its attempt been on the server.
func (p *phaseLog) arrived(w phaseWait) int64 {
	from := w.from
	for _, o := range p.waits {
		if o.write != w.write && o.to > 0 && (w.to == 0 || o.to < w.to) &&
			o.call.After(w.call) && o.call.Sub(w.call) <= arrivalSlack {
			from = max(from, o.from)
		}
	}
	return from
}

func newPhaseLog(t *testing.T, name string) *phaseLog {
	return &phaseLog{rdb: newRedis(t, srv), fenceKey: keysOf(name).Fence, // shared by every lock of the server
		write: map[int64]bool{}, holds: map[string]int{}}
}

// before reads the fence counter: a wait that starts now sees only grants
// above it.
func (p *phaseLog) before(ctx context.Context) (int64, error) {
	f, err := p.rdb.Get(ctx, p.fenceKey).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return f, err
}

// granted records a grant that ended a wait begun at from (to 0: the wait
// did not end, the worker was stopped).
func (p *phaseLog) granted(write bool, who string, from, to int64, call time.Time, took time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if to > 0 {
		p.write[to] = write
		p.holds[who]++
	}
	p.waits = append(p.waits, phaseWait{write, who, from, to, call, took})
}

// check counts, for every wait, the other side's phases that began during
// it, and fails the test if one saw more than the bound plus slack. It
// logs the distribution either way.
func (p *phaseLog) check(t *testing.T, slack int) {
	t.Helper()
	logs, failure := p.verdict(slack)
	for _, l := range logs {
		t.Log(l)
	}
	if failure != "" {
		t.Fatal(failure)
	}
}

// verdict is check's work: the lines it logs, and why the waits fail the
// bound ("" when they keep it).
func (p *phaseLog) verdict(slack int) (logs []string, failure string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fences := make([]int64, 0, len(p.write))
	for f := range p.write {
		fences = append(fences, f)
	}
	slices.Sort(fences)
	// A read phase begins at a reader's fence whose predecessor is a
	// writer's (or which is the first grant of all).
	begins := map[int64]bool{}
	for i, f := range fences {
		begins[f] = !p.write[f] && (i == 0 || p.write[fences[i-1]])
	}
	end := int64(1) << 62
	var readerWorst, writerWorst int
	var readerLongest, writerLongest time.Duration
	readerMax, writerMax := readerMaxWrites+slack, writerMaxPhases+slack
	readerHist, writerHist := map[int]int{}, map[int]int{}
	var worst []string
	for _, w := range p.waits {
		to := w.to
		if to == 0 {
			to = end
		}
		lo, _ := slices.BinarySearch(fences, p.arrived(w)+1)
		hi, _ := slices.BinarySearch(fences, to)
		n := 0
		for _, f := range fences[lo:hi] {
			if (!w.write && p.write[f]) || (w.write && begins[f]) {
				n++
			}
		}
		side, limit := "reader", readerMax
		if w.write {
			side, limit = "writer", writerMax
			writerHist[n]++
			writerWorst = max(writerWorst, n)
			writerLongest = max(writerLongest, w.took)
		} else {
			readerHist[n]++
			readerWorst = max(readerWorst, n)
			readerLongest = max(readerLongest, w.took)
		}
		if n > limit && len(worst) < 10 {
			state := fmt.Sprintf("granted fence %d", w.to)
			if w.to == 0 {
				state = "still waiting at the end"
			}
			what := "write holds"
			if w.write {
				what = "read phases"
			}
			worst = append(worst, fmt.Sprintf("%s %s (from fence %d, %s): %d %s began", side, w.who, w.from, state, n, what))
		}
	}
	logs = append(logs, fmt.Sprintf("%d grants; holds per worker %v", len(fences), p.holds),
		fmt.Sprintf("readers: write holds begun during a wait -> waits %v (worst %d, allowed %d; longest wait %v)",
			readerHist, readerWorst, readerMax, readerLongest.Round(time.Millisecond)),
		fmt.Sprintf("writers: read phases begun during a wait -> waits %v (worst %d, allowed %d; longest wait %v)",
			writerHist, writerWorst, writerMax, writerLongest.Round(time.Millisecond)))
	if readerWorst > readerMax || writerWorst > writerMax {
		logs = append(logs, worst...)
		failure = fmt.Sprintf("a wait outlasted its phases: readers passed by up to %d write holds (allowed %d), writers waited up to %d read phases (allowed %d)",
			readerWorst, readerMax, writerWorst, writerMax)
	}
	return logs, failure
}

// worker takes one side of the lock in a loop, holding it for hold each
// time and taking it again at once, until rounds are done (0: until ctx
// ends). A wait that ctx ends is recorded as unfinished.
func (p *phaseLog) worker(ctx context.Context, t *testing.T, who string, write bool, l dlock.Locker, rounds int,
	hold time.Duration, inside func() error) {
	for i := 0; rounds == 0 || i < rounds; i++ {
		from, err := p.before(ctx)
		if err != nil {
			if ctx.Err() == nil {
				t.Error(err)
			}
			return
		}
		start := time.Now()
		lease, err := l.Lock(ctx)
		took := time.Since(start)
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("%s: %v", who, err)
			}
			p.granted(write, who, from, 0, start, took)
			return
		}
		p.granted(write, who, from, lease.Fence(), start, took)
		if inside != nil {
			if err := inside(); err != nil {
				t.Errorf("%s: %v", who, err)
			}
		}
		if hold > 0 {
			time.Sleep(hold) // the work under the lock
		}
		if err := lease.Unlock(context.Background()); err != nil {
			t.Errorf("%s: unlock: %v", who, err)
			return
		}
	}
}

// Two writers and four readers, each with its own Client, each taking the
// lock again as soon as it let it go: neither side starves. (Reported from
// outside: with "writers first" the writers took turns 2 830 times each in
// 8 s while every reader waited the whole 8 s.)
func TestRWPhaseFair(t *testing.T) {
	name := lockName(t)
	p := newPhaseLog(t, name)
	const writers, readers, rounds = 2, 4, 100
	const hold = time.Millisecond
	wctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang fails, not stalls the suite
	defer cancel()
	rctx, stopReaders := context.WithCancel(wctx)
	defer stopReaders()
	var wg, rg sync.WaitGroup
	for i := range readers {
		rw := client(t).RWMutex(name)
		rg.Add(1)
		go func() {
			defer rg.Done()
			p.worker(rctx, t, fmt.Sprintf("r%d", i), false, rw.RLocker(), 0, hold, nil)
		}()
	}
	for i := range writers {
		rw := client(t).RWMutex(name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.worker(wctx, t, fmt.Sprintf("w%d", i), true, rw, rounds, hold, nil)
		}()
	}
	wg.Wait()
	stopReaders()
	rg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	p.check(t, 1)
}

// A port of the standard library's RWMutex hammer (sync's TestRWMutex):
// two writers and some readers on one Client, a shared activity count
// (readers add 1, writers 10000) checked under the lock; every wait is
// also checked in phases.
func TestRWHammer(t *testing.T) {
	for _, tc := range []struct{ readers, rounds int }{{1, 40}, {3, 30}, {10, 15}} {
		t.Run(fmt.Sprintf("readers=%d", tc.readers), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			name := lockName(t)
			p := newPhaseLog(t, name)
			c := client(t)
			var activity atomic.Int32
			read := func() error {
				n := activity.Add(1)
				defer activity.Add(-1)
				if n < 1 || n >= 10000 {
					return fmt.Errorf("reader inside with activity %d", n)
				}
				return nil
			}
			write := func() error {
				n := activity.Add(10000)
				defer activity.Add(-10000)
				if n != 10000 {
					return fmt.Errorf("writer inside with activity %d", n)
				}
				return nil
			}
			var wg sync.WaitGroup
			start := func(who string, w bool) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rw := c.RWMutex(name)
					l, inside := rw.RLocker(), read
					if w {
						l, inside = rw, write
					}
					// Holds of 2 ms: a wait begins when its goroutine reads the
					// fence, and a goroutine descheduled for a millisecond or two
					// (-race, two busy cores) before its attempt reaches the
					// server would see empty holds pass by the dozen.
					p.worker(ctx, t, who, w, l, tc.rounds, 2*time.Millisecond, inside)
				}()
			}
			start("w0", true)
			i := 0
			for ; i < tc.readers/2; i++ {
				start(fmt.Sprintf("r%d", i), false)
			}
			start("w1", true)
			for ; i < tc.readers; i++ {
				start(fmt.Sprintf("r%d", i), false)
			}
			wg.Wait()
			if t.Failed() {
				t.FailNow()
			}
			p.check(t, 2)
		})
	}
}

// A reader that a writer's release admitted but that never comes (its
// process died while it waited) holds the next writer up only until its
// place in the read phase expires, as a dead writer's place would.
func TestRWAdmittedReaderThatNeverComes(t *testing.T) {
	ctx := context.Background()
	name := lockName(t)
	admin := newRedis(t, srv)
	const placeTTL = 2 * time.Second
	w := mustLock(t, client(t).RWMutex(name), ctx)
	dead, crash := crashingClient(t)
	rdone := make(chan error, 1)
	go func() {
		_, err := dead.RWMutex(name, dlock.WithQueueTTL(placeTTL)).RLock(ctx)
		rdone <- err
	}()
	rqueue, rphase := "dlock:{"+name+"}:rw:rqueue", "dlock:{"+name+"}:rw:rphase"
	waitFor(t, "the reader waiting", func() bool { return admin.ZCard(ctx, rqueue).Val() == 1 })
	// Let it settle into its wait: the confirmation of its subscription
	// makes it try once more, and a crash during that try ends its RLock
	// with the closed client's error, or (rueidis, whose Close lets a
	// connection it has not closed yet carry a command) lets it leave
	// the queue, and no reader is admitted below.
	time.Sleep(50 * time.Millisecond)
	crash() // no leave: its connection is gone first
	// ErrClosed, or the closed go-redis client's error when the wait
	// checked the lock between the two closes.
	if err := <-rdone; err == nil {
		t.Fatal("the crashed reader's RLock succeeded")
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got := make(chan error, 1)
	writer := client(t).RWMutex(name)
	go func() {
		l, err := writer.Lock(wctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	waitFor(t, "the writer waiting", func() bool { return admin.ZCard(ctx, "dlock:{"+name+"}:rw:queue").Val() == 1 })
	unlock(t, w)
	if n := admin.ZCard(ctx, rphase).Val(); n != 1 {
		t.Fatalf("%d readers admitted by the release; want the waiting one", n)
	}
	if info, err := admin.ZRange(ctx, rqueue, 0, -1).Result(); err != nil || len(info) != 0 {
		t.Fatalf("readers still queued after the release: %v %v", info, err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the writer behind a reader that never came: %v", err)
	}
}

// The phase check on made-up waits: it fails a reader passed by three
// writers that called before it, and passes one whose first attempt was
// late — the writers that passed it called after it — unless they called
// more than arrivalSlack after it (a starved reader still fails).
func TestPhaseCheckSeesAPassedReader(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	run := func(writerCall int) string {
		p := &phaseLog{write: map[int64]bool{}, holds: map[string]int{}}
		p.granted(false, "r", 0, 5, at(0), 0) // the reader: fence counter 0 at its call, granted 5
		for f := int64(1); f <= 3; f++ {      // three writers' holds, fences 1-3, before the reader's
			p.granted(true, "w", f-1, f, at(writerCall), 0)
		}
		p.granted(true, "w", 3, 4, at(-1), 0) // and one that called before it
		_, failure := p.verdict(1)
		return failure
	}
	if run(-10) == "" {
		t.Error("a reader passed by writers that called before it: check passed it")
	}
	if f := run(5); f != "" {
		t.Errorf("a reader whose attempt came after the writers' (they called 5 ms after it): %s", f)
	}
	if run(int(arrivalSlack/time.Millisecond)+50) == "" {
		t.Error("a reader passed by writers that called long after it: check passed it")
	}
}
