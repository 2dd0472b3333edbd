package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/dlock-go/dlock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

// Leader election: dlock's Election against what users build today on the
// anchors, which have none — a leader loop on their mutex: Lock (retried
// with the library's own waiting: redsync's and redislock's polling,
// rueidislock's invalidations), hold by extending the lock every TTL/3
// (rueidislock extends by itself), Unlock to resign.
//
// Every candidate and observer has a client of its own (its own go-redis
// client and dlock Client, redsync, redislock client or rueidis Locker),
// as the processes of a service would: nothing is shared but the server,
// so every handover goes through Redis. They live in this process, so
// that one monotonic clock times both sides.

// electionNames are the implementations of BenchmarkElection, dlock first.
var electionNames = []string{"dlock", "redsync", "redislock", "rueidislock"}

// electionBaselines are run beside them in the handover and
// campaign-resign variants: dlock-fairmutex is a leader loop on dlock's
// FairMutex (the lock under an Election, without the leader's value:
// Lock, Unlock), so that the cost of the value's round trip shows.
var electionBaselines = []string{"dlock-fairmutex"}

// handoverWaiting are the numbers of candidates waiting while the leader
// resigns in the handover variants (one more candidate leads).
var handoverWaiting = []int{2, 8}

const (
	// electionSettle is how long an iteration waits, timer stopped, after
	// the last candidate to join has called Campaign, before the leader
	// resigns or dies: time enough on loopback for that Campaign to fail
	// its first attempt and wait.
	electionSettle = 5 * time.Millisecond
	// failoverTTL is the lease of the failover variant.
	failoverTTL = 500 * time.Millisecond
)

// joinJitter is the longest random delay before a candidate calls
// Campaign (Lock) when it joins, or joins again after resigning: the poll
// period of an implementation that polls at a fixed period (redislock), 0
// for the others (dlock and rueidislock are woken; redsync draws every
// delay at random). Without it the harness would line the pollers up: a
// candidate that joins at the instant of a handover — a poll of the
// winner — polls in step with it ever after, so that all waiters poll
// at once and a resign a fixed electionSettle later always waits nearly
// a whole period. Independent processes poll at independent phases.
func joinJitter(name string) time.Duration {
	if name == "redislock" {
		return redislockRetry
	}
	return 0
}

// BenchmarkElection measures leader election: dlock's Election against a
// leader loop on each anchor's mutex (see above), and, in the handover and
// campaign-resign variants, on dlock's FairMutex (electionBaselines).
//
//   - handover-Nwaiting: a leader and N candidates waiting in Campaign
//     (Lock). Each iteration sleeps electionSettle + joinJitter, then the
//     leader resigns (Unlock) and the next leader's Campaign returns; the
//     old leader then campaigns again (after up to joinJitter), behind
//     the others. The timer runs from the Resign call to that return, so
//     ns/op is the mean handover; handover-p50-µs and handover-max-µs are
//     its median and maximum. For dlock, observed-p50-µs and observed-max-µs are from
//     the Resign call to an Observer (a Client of its own) reporting the
//     new leader's term.
//   - campaign-resign: one candidate, nobody else: Campaign then Resign
//     (Lock then Unlock, the anchors' leader loop starting and stopping
//     its extension) in a loop: ns/op and allocs/op per pair, with
//     campaign-p50-µs, resign-p50-µs and a PING's median round trip
//     (ping-p50-µs, measured after, on a client of its own).
//   - failover-ttl500ms: a leader with a 500 ms lease and one candidate
//     waiting. Each iteration the leader dies at a random point of its
//     renewal cycle: its renewals stop and its connection closes (the
//     go-redis client, or the rueidis client, is closed first), nothing
//     is released. The timer runs from the death to the candidate's
//     Campaign returning (takeover-p50/max-µs); after-expiry-p50/max-µs
//     are the same from the moment the dead leader's key expires (its
//     PTTL, read right after the death); lease-left-p50-µs is that PTTL.
//     For dlock, observed-gone-…-µs is from the expiry to the Observer's
//     first report of another state (nobody, or the new leader already),
//     observed-new-…-µs from the expiry to its report of the new leader.
//     A new candidate (a fresh client) then joins, timer stopped.
//
// stalls counts the times a handover or failover took longer than
// stallAfter beyond its expected moment and the waiting Campaigns were
// cancelled and called again (0 for a working election).
func BenchmarkElection(b *testing.B) { runCases(b, electionCases()) }

func electionCases() []benchCase {
	var cs []benchCase
	withBase := append(slices.Clone(electionNames), electionBaselines...)
	for _, n := range handoverWaiting {
		for _, name := range withBase {
			cs = append(cs, benchCase{"Election", fmt.Sprintf("handover-%dwaiting", n), name, electionHandover(name, n)})
		}
	}
	for _, name := range withBase {
		cs = append(cs, benchCase{"Election", "campaign-resign", name, electionCampaignResign(name)})
	}
	for _, name := range electionNames {
		cs = append(cs, benchCase{"Election", fmt.Sprintf("failover-ttl%dms", failoverTTL.Milliseconds()), name, electionFailover(name)})
	}
	return cs
}

// candidate is one candidate of one election, on a client of its own.
// Lock campaigns (blocking until it leads), Unlock resigns; both are its
// mutex side, so that waits.lock can restart a stalled Campaign.
type candidate interface {
	mutex
	// term is the term of the last Campaign won: dlock's fencing token,
	// 0 for the anchors, which have none.
	term() int64
	// die ends the candidate as a crash would: renewals stop and the
	// connection closes; nothing is released, so the lock stays in Redis
	// until its lease runs out.
	die()
	// redisKey is the key that holds the leadership in Redis.
	redisKey() string
	close()
}

// openCandidate connects a candidate of the named implementation, with a
// client of its own, for the election key with a lease of ttl; value is
// its Campaign value (dlock).
func openCandidate(name, addr, key, value string, ttl time.Duration) (candidate, error) {
	switch name {
	case "dlock":
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		c, err := dlock.New(rdb)
		if err != nil {
			_ = rdb.Close()
			return nil, err
		}
		return &dlockCandidate{rdb: rdb, c: c, e: c.Election(key, dlock.WithTTL(ttl)), key: key, value: value}, nil
	case "dlock-fairmutex":
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		c, err := dlock.New(rdb)
		if err != nil {
			_ = rdb.Close()
			return nil, err
		}
		return &fairCandidate{rdb: rdb, c: c, m: c.FairMutex(key, dlock.WithTTL(ttl)), key: key}, nil
	case "redsync":
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		rs := redsync.New(goredis.NewPool(rdb))
		m := rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(math.MaxInt32))
		return &redsyncCandidate{rdb: rdb, m: m, ttl: ttl}, nil
	case "redislock":
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		return &redislockCandidate{rdb: rdb, c: redislock.New(rdb), key: key, ttl: ttl,
			opts: &redislock.Options{RetryStrategy: redislock.LinearBackoff(redislockRetry)}}, nil
	case "rueidislock":
		var client rueidis.Client
		lk, err := rueidislock.NewLocker(rueidislock.LockerOption{
			ClientOption: rueidis.ClientOption{InitAddress: []string{addr}},
			ClientBuilder: func(o rueidis.ClientOption) (rueidis.Client, error) {
				c, err := rueidis.NewClient(o)
				client = c
				return c, err
			},
			KeyMajority:    1,
			KeyValidity:    ttl,
			NoLoopTracking: true, // as its README advises for Redis >= 7.0.5
		})
		if err != nil {
			return nil, err
		}
		return &rueidisCandidate{lk: lk, client: client, key: key}, nil
	}
	return nil, fmt.Errorf("bench: unknown election implementation %q", name)
}

// dlock: Campaign waits in the election's queue, woken by the release
// that hands it the lock; the lease is renewed by the Client's watchdog.
type dlockCandidate struct {
	rdb        *redis.Client
	c          *dlock.Client
	e          *dlock.Election
	key, value string
	ld         *dlock.Leadership
}

func (d *dlockCandidate) Lock(ctx context.Context) (err error) {
	d.ld, err = d.e.Campaign(ctx, d.value)
	return err
}

func (d *dlockCandidate) Unlock(ctx context.Context) error { return d.ld.Resign(ctx) }
func (d *dlockCandidate) term() int64                      { return d.ld.Term() }
func (d *dlockCandidate) die()                             { _ = d.rdb.Close() }
func (d *dlockCandidate) redisKey() string                 { return dlock.DefaultPrefix + ":{" + d.key + "}:election" }

func (d *dlockCandidate) close() {
	_ = d.c.Close()
	_ = d.rdb.Close()
}

// fairCandidate is the leader loop on dlock's FairMutex: the lease is its
// leadership, its fence the term; nobody can observe it.
type fairCandidate struct {
	rdb *redis.Client
	c   *dlock.Client
	m   *dlock.FairMutex
	key string
	l   *dlock.Lease
}

func (f *fairCandidate) Lock(ctx context.Context) (err error) {
	f.l, err = f.m.Lock(ctx)
	return err
}

func (f *fairCandidate) Unlock(ctx context.Context) error { return f.l.Unlock(ctx) }
func (f *fairCandidate) term() int64                      { return f.l.Fence() }
func (f *fairCandidate) die()                             { _ = f.rdb.Close() }
func (f *fairCandidate) redisKey() string                 { return dlock.DefaultPrefix + ":{" + f.key + "}" }

func (f *fairCandidate) close() {
	_ = f.c.Close()
	_ = f.rdb.Close()
}

// extender extends a held lock every ttl/3 until stopped or an extension
// fails: the hold of an anchor's leader loop.
type extender struct {
	stop chan struct{}
	done chan struct{}
}

func startExtender(ttl time.Duration, extend func(context.Context) error) *extender {
	x := &extender{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(x.done)
		t := time.NewTicker(ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-x.stop:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), ttl/3)
				err := extend(ctx)
				cancel()
				if err != nil {
					return // leadership lost
				}
			}
		}
	}()
	return x
}

// halt stops the extensions and waits until none is running.
func (x *extender) halt() {
	if x != nil {
		close(x.stop)
		<-x.done
	}
}

// redsync: LockContext polls with its random 50–250 ms delay.
type redsyncCandidate struct {
	rdb *redis.Client
	m   *redsync.Mutex
	ttl time.Duration
	x   *extender
}

func (r *redsyncCandidate) Lock(ctx context.Context) error {
	if err := r.m.LockContext(ctx); err != nil {
		return err
	}
	r.x = startExtender(r.ttl, func(ctx context.Context) error {
		ok, err := r.m.ExtendContext(ctx)
		if err == nil && !ok {
			err = errors.New("redsync: extend reported failure")
		}
		return err
	})
	return nil
}

func (r *redsyncCandidate) Unlock(ctx context.Context) error {
	r.x.halt()
	r.x = nil
	return redsyncMutex{r.m}.Unlock(ctx)
}

func (r *redsyncCandidate) term() int64      { return 0 }
func (r *redsyncCandidate) redisKey() string { return r.m.Name() }
func (r *redsyncCandidate) close()           { r.x.halt(); r.x = nil; _ = r.rdb.Close() }

func (r *redsyncCandidate) die() {
	r.x.halt()
	r.x = nil
	_ = r.rdb.Close()
}

// redislock: Obtain polls every redislockRetry.
type redislockCandidate struct {
	rdb  *redis.Client
	c    *redislock.Client
	key  string
	ttl  time.Duration
	opts *redislock.Options
	l    *redislock.Lock
	x    *extender
}

func (r *redislockCandidate) Lock(ctx context.Context) (err error) {
	if r.l, err = r.c.Obtain(ctx, r.key, r.ttl, r.opts); err != nil {
		return err
	}
	l := r.l
	r.x = startExtender(r.ttl, func(ctx context.Context) error { return l.Refresh(ctx, r.ttl, nil) })
	return nil
}

func (r *redislockCandidate) Unlock(ctx context.Context) error {
	r.x.halt()
	r.x = nil
	return r.l.Release(ctx)
}

func (r *redislockCandidate) term() int64      { return 0 }
func (r *redislockCandidate) redisKey() string { return r.key }
func (r *redislockCandidate) close()           { r.x.halt(); r.x = nil; _ = r.rdb.Close() }

func (r *redislockCandidate) die() {
	r.x.halt()
	r.x = nil
	_ = r.rdb.Close()
}

// rueidislock: WithContext waits for an invalidation of the key; the lock
// extends itself every KeyValidity/2 until its cancel is called.
type rueidisCandidate struct {
	lk     rueidislock.Locker
	client rueidis.Client
	key    string
	cancel context.CancelFunc
}

func (r *rueidisCandidate) Lock(ctx context.Context) (err error) {
	_, r.cancel, err = r.lk.WithContext(ctx, r.key)
	return err
}

func (r *rueidisCandidate) Unlock(context.Context) error {
	r.cancel()
	return nil
}

func (r *rueidisCandidate) term() int64      { return 0 }
func (r *rueidisCandidate) redisKey() string { return "rueidislock:0:" + r.key } // its prefix, key 0 of 1
func (r *rueidisCandidate) die()             { r.client.Close() }                // extensions and the final delete fail
func (r *rueidisCandidate) close()           { r.lk.Close() }

// openCandidates opens n candidates of the named implementation on the
// election key, each warmed up by a Campaign and Resign of an election of
// its own (which fills its connections); they are closed when the run
// ends.
func openCandidates(b *testing.B, name, key string, ttl time.Duration, n int) []candidate {
	b.Helper()
	cs := make([]candidate, n)
	for i := range cs {
		cs[i] = openWarmCandidate(b, name, key, fmt.Sprintf("candidate-%d", i), ttl)
		b.Cleanup(cs[i].close)
	}
	return cs
}

// openWarmCandidate opens one candidate and warms it up; the caller
// closes it.
func openWarmCandidate(b *testing.B, name, key, value string, ttl time.Duration) candidate {
	b.Helper()
	addr := serverAddr(b)
	ctx, cancel := context.WithTimeout(context.Background(), warmTimeout)
	defer cancel()
	warm, err := openCandidate(name, addr, newKey("election-warm"), value, ttl)
	if err != nil {
		fatalf(b, "%s: %v", name, err)
	}
	err = lockUnlock(ctx, warm)
	warm.close()
	if err != nil {
		fatalf(b, "%s: warm-up: %v", name, err)
	}
	c, err := openCandidate(name, addr, key, value, ttl)
	if err != nil {
		fatalf(b, "%s: %v", name, err)
	}
	return c
}

// won is what a Campaign in the background returned.
type won struct {
	i    int // the candidate
	term int64
	at   time.Time
	err  error
}

// campaigns runs the Campaigns of a run's candidates in the background,
// under one waits (so that a stall restarts them all, and stop ends
// them), and delivers their outcomes. Each Campaign is called after a
// random delay of up to jitter (see joinJitter).
type campaigns struct {
	cs     []candidate
	w      *waits
	won    chan won
	wg     sync.WaitGroup
	jitter time.Duration
}

// newCampaigns makes the Campaigns of cs; at most room of them may have
// returned and not been taken by next at any time.
func newCampaigns(ctx context.Context, cs []candidate, room int, jitter time.Duration) *campaigns {
	return &campaigns{cs: cs, w: newWaits(ctx), won: make(chan won, room), jitter: jitter}
}

// start has candidate i campaign in the background. Only the
// benchmark's goroutine touches cs (it may append to it).
func (p *campaigns) start(i int) {
	c := p.cs[i]
	var delay time.Duration
	if p.jitter > 0 {
		delay = rand.N(p.jitter)
	}
	p.wg.Go(func() {
		select {
		case <-time.After(delay):
		case <-p.w.stopped:
		}
		err := p.w.lock(c)
		r := won{i: i, at: time.Now(), err: err}
		if err == nil {
			r.term = c.term()
		}
		p.won <- r
	})
}

// next returns the next Campaign that returns. Whenever none has for
// patience, the waiting ones are cancelled and called again (a stall,
// counted in *stalls) and patience starts again, from stallAfter.
func (p *campaigns) next(ctx context.Context, patience time.Duration, stalls *int) (won, error) {
	t := time.NewTimer(patience)
	defer t.Stop()
	for {
		select {
		case r := <-p.won:
			return r, r.err
		case <-t.C:
			*stalls++
			p.w.unstick()
			t.Reset(stallAfter)
		case <-ctx.Done():
			return won{}, ctx.Err()
		}
	}
}

// leaderWon reports a Campaign that returned while another candidate led.
func (p *campaigns) leaderWon() (won, bool) {
	select {
	case r := <-p.won:
		return r, true
	default:
		return won{}, false
	}
}

// stop cancels the Campaigns still waiting and waits for them; those that
// won meanwhile resign.
func (p *campaigns) stop(ctx context.Context) {
	p.w.stop()
	p.wg.Wait()
	close(p.won)
	for r := range p.won {
		if r.err == nil {
			_ = p.cs[r.i].Unlock(ctx)
		}
	}
}

// observed is one state an Observer reported, and when.
type observed struct {
	term int64
	at   time.Time
}

// observer follows an election with dlock's Observe on a Client of its
// own, and keeps every state it reports, with the time it came.
type observer struct {
	mu      sync.Mutex
	seen    []observed
	changed chan struct{} // signalled after each state
}

func startObserver(b *testing.B, ctx context.Context, key string) *observer {
	b.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: serverAddr(b)})
	c, err := dlock.New(rdb)
	if err != nil {
		fatalf(b, "%v", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	o := &observer{changed: make(chan struct{}, 1)}
	ch := c.Election(key).Observe(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for info := range ch {
			if info.Err != nil {
				continue
			}
			at := time.Now()
			o.mu.Lock()
			o.seen = append(o.seen, observed{info.Term, at})
			o.mu.Unlock()
			select {
			case o.changed <- struct{}{}:
			default:
			}
		}
	}()
	b.Cleanup(func() {
		cancel()
		<-done
		_ = c.Close()
		_ = rdb.Close()
	})
	return o
}

// wait returns the time of the first state reported at or after since
// that satisfies ok; false if none comes within patience.
func (o *observer) wait(since time.Time, patience time.Duration, ok func(term int64) bool) (time.Time, bool) {
	t := time.NewTimer(patience)
	defer t.Stop()
	for {
		o.mu.Lock()
		for _, s := range o.seen {
			if !s.at.Before(since) && ok(s.term) {
				o.mu.Unlock()
				return s.at, true
			}
		}
		o.mu.Unlock()
		select {
		case <-o.changed:
		case <-t.C:
			return time.Time{}, false
		}
	}
}

// latest returns the last state reported, false if none yet.
func (o *observer) latest() (observed, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.seen) == 0 {
		return observed{}, false
	}
	return o.seen[len(o.seen)-1], true
}

// reportMicros adds the median and maximum of ds as metrics prefix-p50-µs
// and prefix-max-µs.
func reportMicros(b *testing.B, prefix string, ds []time.Duration) {
	s := summarize(ds)
	b.ReportMetric(float64(s.p50)/1e3, prefix+"-p50-µs")
	b.ReportMetric(float64(s.max)/1e3, prefix+"-max-µs")
}

// electionHandover returns the handover benchmark of one implementation
// with waiting candidates waiting.
func electionHandover(name string, waiting int) func(*testing.B) {
	return func(b *testing.B) {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		key := newKey("election")
		cs := openCandidates(b, name, key, lockTTL, waiting+1)
		var obs *observer
		if name == "dlock" {
			obs = startObserver(b, ctx, key)
		}
		p := newCampaigns(ctx, cs, len(cs), joinJitter(name))
		defer p.stop(ctx)

		stalls := 0
		p.start(0)
		first, err := p.next(ctx, stallAfter, &stalls)
		if err != nil {
			fatalf(b, "%s: first Campaign: %v", name, err)
		}
		leader, term := first.i, first.term
		for i := 1; i < len(cs); i++ {
			p.start(i)
		}

		var handover, seen []time.Duration
		b.ResetTimer()
		b.StopTimer()
		settle := electionSettle + joinJitter(name)
		for range b.N {
			time.Sleep(settle)
			if r, ok := p.leaderWon(); ok {
				fatalf(b, "%s: candidate %d won (err %v) while candidate %d led", name, r.i, r.err, leader)
			}
			b.StartTimer()
			t0 := time.Now()
			if err := cs[leader].Unlock(ctx); err != nil {
				fatalf(b, "%s: resign: %v", name, err)
			}
			r, err := p.next(ctx, stallAfter, &stalls)
			b.StopTimer()
			if err != nil {
				fatalf(b, "%s: Campaign: %v", name, err)
			}
			if r.i == leader {
				fatalf(b, "%s: the resigned leader %d won again: it was not campaigning", name, leader)
			}
			handover = append(handover, r.at.Sub(t0))
			if term != 0 && r.term <= term { // dlock's terms (fences) only grow
				fatalf(b, "%s: term %d after term %d", name, r.term, term)
			}
			if obs != nil {
				at, ok := obs.wait(t0, stallAfter, func(t int64) bool { return t == r.term })
				if !ok {
					fatalf(b, "%s: the observer did not report term %d within %v", name, r.term, stallAfter)
				}
				seen = append(seen, at.Sub(t0))
			}
			p.start(leader) // the old leader campaigns again, behind the others
			leader, term = r.i, r.term
		}
		reportMicros(b, "handover", handover)
		if obs != nil {
			reportMicros(b, "observed", seen)
		}
		b.ReportMetric(float64(stalls), "stalls")
		if err := cs[leader].Unlock(ctx); err != nil {
			fatalf(b, "%s: last resign: %v", name, err)
		}
	}
}

// electionCampaignResign returns the uncontended benchmark of one
// implementation.
func electionCampaignResign(name string) func(*testing.B) {
	return func(b *testing.B) {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		c := openCandidates(b, name, newKey("election"), lockTTL, 1)[0]
		var camp, res []time.Duration
		b.ReportAllocs()
		for b.Loop() {
			t0 := time.Now()
			if err := c.Lock(ctx); err != nil {
				fatalf(b, "%s: Campaign: %v", name, err)
			}
			t1 := time.Now()
			if err := c.Unlock(ctx); err != nil {
				fatalf(b, "%s: Resign: %v", name, err)
			}
			camp, res = append(camp, t1.Sub(t0)), append(res, time.Since(t1))
		}
		b.StopTimer()
		b.ReportMetric(float64(summarize(camp).p50)/1e3, "campaign-p50-µs")
		b.ReportMetric(float64(summarize(res).p50)/1e3, "resign-p50-µs")
		b.ReportMetric(float64(pingMedian(b, serverAddr(b), len(camp)))/1e3, "ping-p50-µs")
	}
}

// electionFailover returns the failover benchmark of one implementation:
// see BenchmarkElection.
func electionFailover(name string) func(*testing.B) {
	return func(b *testing.B) {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		admin := redis.NewClient(&redis.Options{Addr: serverAddr(b), PoolSize: 1})
		b.Cleanup(func() { _ = admin.Close() })
		key := newKey("failover")
		ttl := failoverTTL

		// Candidates come and go: each dead leader is closed in the
		// background (a dlock Client whose Redis client is closed gives up
		// its last release after a while), the others when the run ends.
		var closing sync.WaitGroup
		defer closing.Wait()
		var obs *observer
		if name == "dlock" {
			obs = startObserver(b, ctx, key)
		}
		p := newCampaigns(ctx, nil, 1024, joinJitter(name))
		dead := map[int]bool{}
		join := func() {
			p.cs = append(p.cs, openWarmCandidate(b, name, key, fmt.Sprintf("candidate-%d", len(p.cs)), ttl))
			p.start(len(p.cs) - 1)
		}
		defer func() {
			p.stop(ctx)
			for i, c := range p.cs {
				if !dead[i] {
					closing.Go(c.close)
				}
			}
		}()
		stalls := 0
		join()
		first, err := p.next(ctx, stallAfter, &stalls)
		if err != nil {
			fatalf(b, "%s: first Campaign: %v", name, err)
		}
		leader, term := first.i, first.term
		join()

		var takeover, afterExpiry, left, gone, seenNew []time.Duration
		b.ResetTimer()
		b.StopTimer()
		for range b.N {
			// Die at a random point of the renewal cycle.
			time.Sleep(electionSettle + joinJitter(name) + rand.N(ttl/3))
			if r, ok := p.leaderWon(); ok {
				fatalf(b, "%s: candidate %d won (err %v) while candidate %d led", name, r.i, r.err, leader)
			}
			if obs != nil {
				if _, ok := obs.wait(time.Time{}, stallAfter, func(t int64) bool { return t == term }); !ok {
					fatalf(b, "%s: the observer did not report term %d", name, term)
				}
			}
			b.StartTimer()
			t0 := time.Now()
			p.cs[leader].die()
			pttl, err := admin.PTTL(ctx, p.cs[leader].redisKey()).Result()
			expiry := time.Now().Add(pttl)
			if err != nil || pttl <= 0 {
				fatalf(b, "%s: PTTL of the dead leader's key %q: %v %v", name, p.cs[leader].redisKey(), pttl, err)
			}
			r, err := p.next(ctx, pttl+stallAfter, &stalls)
			b.StopTimer()
			if err != nil {
				fatalf(b, "%s: Campaign: %v", name, err)
			}
			if r.i == leader {
				fatalf(b, "%s: the dead leader %d won", name, leader)
			}
			takeover = append(takeover, r.at.Sub(t0))
			afterExpiry = append(afterExpiry, r.at.Sub(expiry))
			left = append(left, pttl)
			if term != 0 && r.term <= term {
				fatalf(b, "%s: term %d after term %d", name, r.term, term)
			}
			if obs != nil {
				old := term
				at, ok := obs.wait(t0, stallAfter, func(t int64) bool { return t != old })
				if !ok {
					fatalf(b, "%s: the observer did not report the end of term %d", name, old)
				}
				gone = append(gone, at.Sub(expiry))
				at, ok = obs.wait(t0, stallAfter, func(t int64) bool { return t == r.term })
				if !ok {
					fatalf(b, "%s: the observer did not report term %d", name, r.term)
				}
				seenNew = append(seenNew, at.Sub(expiry))
			}
			dead[leader] = true
			closing.Go(p.cs[leader].close)
			leader, term = r.i, r.term
			join()
		}
		reportMicros(b, "takeover", takeover)
		reportMicros(b, "after-expiry", afterExpiry)
		b.ReportMetric(float64(summarize(left).p50)/1e3, "lease-left-p50-µs")
		if obs != nil {
			reportMicros(b, "observed-gone", gone)
			reportMicros(b, "observed-new", seenNew)
		}
		b.ReportMetric(float64(stalls), "stalls")
	}
}
