package torture

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/envdriver"
	"github.com/redis/go-redis/v9"
)

// EnvWorker switches a re-executed test binary into a worker process; its
// value is the worker's configuration as JSON.
const EnvWorker = "DLOCK_TORTURE_WORKER"

// workerConfig is what the parent tells a worker process.
type workerConfig struct {
	ID        string // incarnation, "w1.0"
	Slot      int    // worker slot: names private to the process
	Addr      string // redis-server
	ProxyAddr string // the fault proxy in front of it (the "late" fault)
	// QuorumAddrs: the RedLock nodes, each through a proxy of this
	// worker's that the qpart fault can cut.
	QuorumAddrs []string
	Seed        uint64         // this incarnation's seed
	Goroutines  int            // driver goroutines
	Weights     map[string]int // scenario weights
}

// worker is one worker process.
type worker struct {
	cfg    workerConfig
	em     *emitter
	slots  []*slot
	ops    atomic.Int64 // acquire call ids
	leases atomic.Int64 // lease ids
	// leaders: the owner recorded for each Leadership this worker was
	// given: a Campaign on a Client that leads already returns that
	// leadership (dlock proclaims), which is the same owner, not a new one.
	leaders sync.Map     // *dlock.Leadership -> owner
	values  recordings   // the values its Campaigns and Proclaims recorded
	gids    atomic.Int64 // goroutine ids of helpers
	fwrites atomic.Int64 // fenced writes made (fenced.go)
	// privates numbers the Clients made for one scenario.
	privates atomic.Int64
	// nextReopen is when a Client may be closed next (unix ns).
	nextReopen atomic.Int64
	// quorum is the RedLock Client on the quorum nodes, and its nodes.
	quorum *dlock.Client
	qnodes []*redis.Client
	// dl are the deadlock shapes' Clients (shapes_deadlock.go): on slots
	// 0 and 1's go-redis clients, with a short WithDeadlockDelay.
	dl []*dlock.Client
}

// slot is a go-redis client with the dlock Client currently made on it;
// "reopen" replaces the Client (closing the old one) while others use it.
type slot struct {
	idx int
	rdb *redis.Client
	mu  sync.Mutex
	gen int
	c   *dlock.Client
}

func (s *slot) current() (*dlock.Client, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c, fmt.Sprintf("c%d.%d", s.idx, s.gen)
}

// WorkerMain runs a worker process: it drives random operations until the
// parent writes "stop" on stdin, releases what it holds, reports "quiet",
// and on "exit" closes everything and returns its exit code. leaks is
// called last, with every Client and Redis client closed; a non-nil error
// makes the exit code 3.
// resendReadTimeout is the ReadTimeout of a worker's third go-redis
// client: shorter than the torture's stalls, so that go-redis re-sends.
const resendReadTimeout = 400 * time.Millisecond

func WorkerMain(leaks func() error) int {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(os.Getenv(EnvWorker)), &cfg); err != nil {
		stderrf("torture worker: bad config: %v", err)
		return 2
	}
	w := &worker{cfg: cfg, em: &emitter{w: os.Stdout, id: cfg.ID}}
	for i := range 3 {
		opt := &redis.Options{Addr: cfg.Addr, ContextTimeoutEnabled: i == 0}
		if i != 1 && cfg.ProxyAddr != "" {
			// Through the proxy: the "late" fault holds commands of
			// these clients past their give-up (slot 0 gives up at the
			// ctx's deadline, slot 2 at its short ReadTimeout and then
			// re-sends) and delivers them afterwards.
			opt.Addr = cfg.ProxyAddr
		}
		if i == 2 {
			// go-redis's own re-sends: a stall (1-2 s) outlasts this
			// ReadTimeout, and go-redis (MaxRetries at its default, 3)
			// sends the call again; the server runs every copy.
			opt.ReadTimeout = resendReadTimeout
		}
		rdb := redis.NewClient(opt)
		c, err := envdriver.New(rdb, dlock.WithPrefix(prefix))
		if err != nil {
			stderrf("torture worker: dlock.New: %v", err)
			return 2
		}
		w.slots = append(w.slots, &slot{idx: i, rdb: rdb, c: c})
	}

	if cfg.Weights["deadlock"] > 0 || cfg.Weights["deadlockcycle"] > 0 {
		for _, s := range w.slots[:2] {
			c, err := envdriver.New(s.rdb, dlock.WithPrefix(prefix), dlock.WithDeadlockDelay(dlDelay))
			if err != nil {
				stderrf("torture worker: dlock.New: %v", err)
				return 2
			}
			w.dl = append(w.dl, c)
		}
	}

	if len(cfg.QuorumAddrs) > 0 {
		for _, a := range cfg.QuorumAddrs {
			w.qnodes = append(w.qnodes, redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true}))
		}
		q, err := dlock.NewQuorum(w.qnodes, dlock.WithPrefix(prefix))
		if err != nil {
			stderrf("torture worker: dlock.NewQuorum: %v", err)
			return 2
		}
		w.quorum = q
	}

	cmds := make(chan string)
	go func() {
		defer close(cmds)
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			cmds <- sc.Text()
			if sc.Text() == "exit" {
				return
			}
		}
	}()

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range cfg.Goroutines {
		g := w.newGor(i+1, cfg.Seed+uint64(i)*0x9e3779b97f4a7c15)
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.run(ctx)
		}()
	}
	if cfg.Weights["rwstream"] > 0 {
		g := w.newGor(800, cfg.Seed^0x5eed5)
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.rwStream(ctx)
		}()
	}
	if cfg.Weights["observe"] > 0 {
		g := w.newGor(850, cfg.Seed^0x0b5e)
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.observe(ctx)
		}()
	}
	cmd := "" // "stop", or EOF: the parent is gone
	for c := range cmds {
		if c == "stop" || c == "exit" {
			cmd = c
			break
		}
		if strings.HasPrefix(c, "rburst ") {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.resetBurst(ctx, c)
			}()
		}
		if strings.HasPrefix(c, "burst ") {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.burst(ctx, c)
			}()
		}
		if strings.HasPrefix(c, "handoff ") {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.handoffWait(ctx, c)
			}()
		}
	}
	stop()
	wg.Wait()
	w.em.emit(Event{K: kQuiet})
	if cmd == "stop" {
		for c := range cmds {
			if c == "exit" {
				break
			}
		}
	}
	for range cmds { // the reader has returned once cmds is closed
	}
	for _, c := range w.dl {
		_ = c.Close()
	}
	for _, s := range w.slots {
		c, _ := s.current()
		_ = c.Close()
		_ = s.rdb.Close()
		envdriver.Forget(s.rdb)
	}
	if w.quorum != nil {
		_ = w.quorum.Close()
	}
	for _, n := range w.qnodes {
		_ = n.Close()
	}
	if err := leaks(); err != nil {
		stderrf("torture worker %s: goroutines left behind: %v", cfg.ID, err)
		return 3
	}
	return 0
}

// gor is one driver goroutine (or a helper it started) with its own
// random source.
type gor struct {
	w   *worker
	id  int
	rng *rand.Rand
}

func (w *worker) newGor(id int, seed uint64) *gor {
	return &gor{w: w, id: id, rng: rand.New(rand.NewPCG(seed, uint64(id)))}
}

// helper returns a goroutine state for a helper started by g.
func (g *gor) helper() *gor {
	return g.w.newGor(1000+int(g.w.gids.Add(1)), g.rng.Uint64())
}

func (g *gor) emit(e Event) {
	e.G = g.id
	g.w.em.emit(e)
}

// fatal records something that must never happen; the run fails.
func (g *gor) fatal(format string, args ...any) {
	g.emit(Event{K: kFatal, Msg: fmt.Sprintf(format, args...)})
}

// slot returns a random client slot.
func (g *gor) slot() *slot { return g.w.slots[g.rng.IntN(len(g.w.slots))] }

// run picks scenarios until ctx ends. Goroutine 1 only runs relay and
// goroutine 2 only relaycancel (when they are on and there are more
// goroutines): hand-offs keep going however long the other goroutines are
// held up by locks that others never free.
func (g *gor) run(ctx context.Context) {
	weights := g.w.cfg.Weights
	for i, scn := range []string{"relay", "relaycancel"} {
		if g.id == i+1 && weights[scn] > 0 && g.w.cfg.Goroutines > 2 {
			weights = map[string]int{scn: 1}
		}
	}
	for ctx.Err() == nil {
		switch pick(g.rng, weights) {
		case "mix":
			g.mix(ctx)
		case "relay":
			g.relay(ctx, false)
		case "relaycancel":
			g.relay(ctx, true)
		case "close":
			g.closeHeld(ctx)
		case "extend":
			g.extendRace(ctx)
		case "unlock":
			g.unlockEnded(ctx)
		case "waiter":
			g.longWaiter(ctx)
		case "reopen":
			// At most one Client.Close per worker every few seconds.
			t, next := now(), g.w.nextReopen.Load()
			if t >= next && g.w.nextReopen.CompareAndSwap(next, t+int64(between(g.rng, 3*time.Second, 8*time.Second))) {
				g.reopen()
			}
		case "lockall":
			g.lockAll(ctx)
		case "shortctx":
			g.shortCtx(ctx)
		case "election":
			g.elect(ctx)
		case "nested":
			g.nested(ctx)
		case "mixedopts":
			g.mixedOpts(ctx)
		case "latch":
			g.latchPhases(ctx)
		case "redlock":
			g.redlock(ctx)
		case "deadlock":
			g.deadlockShape(ctx, false)
		case "deadlockcycle":
			g.deadlockShape(ctx, true)
		default:
			sleepCtx(ctx, 50*time.Millisecond)
		}
	}
}

// reopen closes a slot's Client while others may be using it, after
// putting a new Client in its place.
func (g *gor) reopen() {
	s := g.slot()
	nc, err := envdriver.New(s.rdb, dlock.WithPrefix(prefix))
	if err != nil {
		g.fatal("dlock.New: %v", err)
		return
	}
	s.mu.Lock()
	old, oldID := s.c, fmt.Sprintf("c%d.%d", s.idx, s.gen)
	s.c = nc
	s.gen++
	s.mu.Unlock()
	t0 := now()
	err = old.Close()
	g.emit(Event{T: t0, End: now(), K: kClose, Client: oldID, EK: errKind(err)})
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
