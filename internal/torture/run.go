//go:build unix

package torture

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
)

// Options configures a run.
type Options struct {
	Seed       uint64
	Duration   time.Duration  // of the load phase
	Workers    int            // worker processes
	Goroutines int            // driver goroutines per worker
	Weights    map[string]int // scenarios (defaultWeights)
	Faults     map[string]int // fault kinds (defaultFaults)
	Dir        string         // where the history is written
	Logf       func(format string, args ...any)
}

// Result is the outcome of a run.
type Result struct {
	Violations []Violation
	History    string // path of the history (JSON lines)
	Start      int64
	Stop       int64
	Events     int
	Summary    string
	h          *history
}

// runner is the parent side of a run.
type runner struct {
	opts Options
	srv  *redistest.Server
	// proxies stand between redis-server and two of each worker's three
	// go-redis clients, one per worker slot (a host's network path); the
	// "late" fault stalls one's connections.
	proxies []*faultproxy.Proxy
	quorum  *quorumWorld // the RedLock nodes
	rec     *recorder

	mu         sync.Mutex
	procs      []*proc // the current incarnation of each slot
	incs       []int
	all        []*proc
	stopping   bool
	unexpected []Violation
	start      int64
	ho         hoActor // the handoff fault's side in the parent

	// clockShim: the server runs under the clock shim (the clock faults
	// are in the mix and a C compiler was found). clockMu keeps a clock
	// fault and a server restart apart.
	clockShim bool
	clockMu   sync.Mutex
}

func (r *runner) logf(format string, args ...any) {
	if r.opts.Logf != nil {
		r.opts.Logf(format, args...)
	}
}

func (r *runner) rel(t int64) string { return fmt.Sprintf("+%.3fs", float64(t-r.start)/1e9) }

// Run runs the torture test: it starts a redis-server with AOF and the
// worker processes, injects faults for opts.Duration, stops the workers,
// probes every name, and checks the history.
func Run(opts Options) (*Result, error) {
	// A soak keeps millions of events, and the checks index them: ask the
	// collector to keep the heap (the race detector's shadow grows with
	// it) near what is live rather than twice that.
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(4 << 30))
	// DEBUG SLEEP (the stall fault) needs the DEBUG command; the clock
	// faults need the clock shim, which needs a C compiler.
	srvOpts := redistest.Options{AOF: true, Args: []string{"--enable-debug-command", "local"}}
	clockFaults := 0
	for _, k := range clockKinds {
		clockFaults += max(opts.Faults[k], 0)
	}
	srvOpts.ShimClock = clockFaults > 0
	srv, err := redistest.Start(srvOpts)
	if errors.Is(err, redistest.ErrNoCompiler) {
		if opts.Logf != nil {
			opts.Logf("no clock faults in this run: %v", err)
		}
		srvOpts.ShimClock = false
		srv, err = redistest.Start(srvOpts)
	}
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	var proxies []*faultproxy.Proxy
	defer func() {
		for _, p := range proxies {
			p.Close()
		}
	}()
	quorum, err := startQuorum(opts.Workers)
	if err != nil {
		return nil, err
	}
	defer quorum.close()
	for range opts.Workers {
		p, err := faultproxy.New(srv.Addr())
		if err != nil {
			return nil, err
		}
		proxies = append(proxies, p)
	}
	path := filepath.Join(opts.Dir, fmt.Sprintf("history-%d.jsonl", opts.Seed))
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := &runner{opts: opts, srv: srv, proxies: proxies, quorum: quorum, rec: &recorder{w: bufio.NewWriterSize(f, 1<<20)},
		procs: make([]*proc, opts.Workers), incs: make([]int, opts.Workers), start: now(), clockShim: srvOpts.ShimClock}
	defer r.rec.flush()
	r.rec.add(Event{K: "start", W: "parent", Msg: fmt.Sprintf("seed %d, redis %s", opts.Seed, srv.Addr())})
	for slot := range opts.Workers {
		if _, err := r.respawn(slot); err != nil {
			r.killAll()
			return nil, err
		}
	}

	// The deadline lets the injector leave out a long fault (handoff) that
	// would run past the load phase.
	ictx, stopInjecting := context.WithTimeout(context.Background(), opts.Duration)
	injected := make(chan struct{})
	go func() {
		defer close(injected)
		r.inject(ictx, rand.New(rand.NewPCG(opts.Seed, 0xfa17)))
	}()
	time.Sleep(opts.Duration)
	stopInjecting()
	<-injected

	stop := now()
	r.mu.Lock()
	r.stopping = true
	procs := slices.Clone(r.procs)
	r.mu.Unlock()
	r.rec.add(Event{T: stop, K: "stop", W: "parent"})
	var vs []Violation
	for _, p := range procs {
		p.send("stop")
	}
	for _, p := range procs {
		select {
		case <-p.quiet:
		case <-p.done:
		case <-time.After(30 * time.Second):
			vs = append(vs, Violation{Kind: "process", T: now(),
				Msg: fmt.Sprintf("worker %s did not stop within 30 s of being told to", p.id)})
		}
	}
	r.logf("workers quiet %s after the stop", time.Duration(now()-stop).Round(time.Millisecond))

	vs = append(vs, r.probe(index(r.rec.snapshot(), r.start, stop))...)
	vs = append(vs, r.checkWaitRecords(now())...)
	r.readFencedLogs()
	if r.ho.close != nil {
		r.ho.close()
	}

	for _, p := range procs {
		p.send("exit")
		_ = p.stdin.Close()
	}
	for _, p := range procs {
		if !p.wait(20 * time.Second) {
			_ = p.cmd.Process.Kill()
			p.wait(5 * time.Second)
			vs = append(vs, Violation{Kind: "process", T: now(), Msg: fmt.Sprintf("worker %s did not exit", p.id)})
		}
	}
	r.mu.Lock()
	vs = append(vs, r.unexpected...)
	all := slices.Clone(r.all)
	r.mu.Unlock()
	for _, p := range all {
		p.mu.Lock()
		killed := p.killed
		p.mu.Unlock()
		probs := p.problems()
		if len(probs) > 0 || (!killed && p.err != nil && slices.Contains(procs, p)) {
			vs = append(vs, Violation{Kind: "process", T: now(),
				Msg: fmt.Sprintf("worker %s: exit %v, stderr shows %v:\n%s", p.id, p.err, probs, p.stderr.String())})
		}
	}

	events := r.rec.take()
	h := index(events, r.start, stop)
	vs = append(vs, h.check()...)
	slices.SortStableFunc(vs, func(a, b Violation) int { return cmpInt(a.T, b.T) })
	return &Result{Violations: vs, History: path, Start: r.start, Stop: stop, Events: len(events),
		Summary: h.summary(), h: h}, nil
}

// respawn starts the next incarnation of slot.
func (r *runner) respawn(slot int) (*proc, error) {
	r.mu.Lock()
	inc := r.incs[slot]
	r.incs[slot]++
	r.mu.Unlock()
	p, err := r.spawn(slot, inc)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.procs[slot] = p
	r.all = append(r.all, p)
	r.mu.Unlock()
	go r.watch(p)
	return p, nil
}

// watch reports a worker that exits by itself during the run (a panic, a
// fatal error) and starts a new one in its place.
func (r *runner) watch(p *proc) {
	<-p.done
	p.mu.Lock()
	killed := p.killed
	p.mu.Unlock()
	r.mu.Lock()
	stopping := r.stopping
	if !killed && !stopping {
		r.unexpected = append(r.unexpected, Violation{Kind: "process", T: now(),
			Msg: fmt.Sprintf("worker %s exited during the run: %v; stderr:\n%s", p.id, p.err, p.stderr.String())})
	}
	r.mu.Unlock()
	if !killed && !stopping {
		if _, err := r.respawn(p.slot); err != nil {
			r.logf("respawn of slot %d: %v", p.slot, err)
		}
	}
}

func (r *runner) killAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopping = true
	for _, p := range r.all {
		_ = p.cmd.Process.Kill()
	}
}

// recorder keeps the merged history in a file, and in memory what the
// checks need: of the beliefs of a lease only the last, and of TryLock
// calls only those that did not fail plainly (a long soak stays small).
type recorder struct {
	mu      sync.Mutex
	events  []Event
	w       *bufio.Writer
	beliefs map[string]Event // lease -> its last belief
	tries   map[string]Event // TryLock calls without a result yet
	waits   map[string]Event // Lock calls without a result yet (for the waitstop fault)
}

func (r *recorder) add(e Event) {
	if e.T == 0 {
		e.T = now()
	}
	b, _ := json.Marshal(e)
	r.addRaw(e, b)
}

func (r *recorder) addRaw(e Event, line []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, _ = r.w.Write(line)
	_ = r.w.WriteByte('\n')
	if r.beliefs == nil {
		r.beliefs, r.tries, r.waits = map[string]Event{}, map[string]Event{}, map[string]Event{}
	}
	switch k := callKey(e.W, e.Op); {
	case e.K == kBelief:
		lk := leaseKey(e.W, e.Lease)
		if b, ok := r.beliefs[lk]; !ok || e.T > b.T {
			r.beliefs[lk] = e
		}
		return
	case e.K == kCall && !e.Wait:
		r.tries[k] = e
		return
	case (e.K == kGrant || e.K == kFail) && r.tries[k].K != "":
		c := r.tries[k]
		delete(r.tries, k)
		// A plain refusal is dropped, unless it came after its deadline
		// (the ctx check needs it).
		if e.K == kFail && e.EK == "notobtained" && (c.DL == 0 || e.T <= c.DL) {
			return
		}
		r.events = append(r.events, c)
	case e.K == kCall:
		r.waits[k] = e
	case e.K == kGrant || e.K == kFail:
		delete(r.waits, k)
	}
	r.events = append(r.events, e)
}

func (r *recorder) snapshot() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.events)
	for _, e := range r.tries {
		out = append(out, e)
	}
	for _, e := range r.beliefs {
		out = append(out, e)
	}
	return out
}

// take is snapshot for the last reader: the recorded events without a
// copy (a soak keeps millions); nothing may be added after it.
func (r *recorder) take() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.events
	r.events = nil
	for _, e := range r.tries {
		out = append(out, e)
	}
	for _, e := range r.beliefs {
		out = append(out, e)
	}
	return out
}

// waiting returns the Lock calls in flight (no result yet) that were
// called before t.
func (r *recorder) waiting(t int64) []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Event
	for _, e := range r.waits {
		if e.T < t {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b Event) int { return cmpInt(a.T, b.T) })
	return out
}

// has reports whether n events match f.
func (r *recorder) has(n int, f func(Event) bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.events) - 1; i >= 0 && i >= len(r.events)-20000 && n > 0; i-- {
		if f(r.events[i]) {
			n--
		}
	}
	return n <= 0
}

// lastGrant returns the latest grant event that f accepts among the last
// 20000 events, if any.
func (r *recorder) lastGrant(f func(Event) bool) (Event, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.events) - 1; i >= 0 && i >= len(r.events)-20000; i-- {
		if e := r.events[i]; e.K == kGrant && f(e) {
			return e, true
		}
	}
	return Event{}, false
}

func (r *recorder) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.w.Flush()
}

// check runs every check of the history.
func (h *history) check() []Violation {
	var vs []Violation
	for _, e := range h.fatal {
		cat, _, _ := strings.Cut(e.Msg, " (")
		cat, _, _ = strings.Cut(cat, ": ")
		vs = append(vs, Violation{Kind: "fatal", Cat: "fatal: " + cat, T: e.T,
			Msg: fmt.Sprintf("worker %s: %s", e.W, e.Msg), Related: []Event{e}})
	}
	for _, name := range h.names() {
		vs = append(vs, h.checkSafety(name)...)
		vs = append(vs, h.checkFences(name)...)
		vs = append(vs, h.checkCapacity(name)...)
		vs = append(vs, h.checkInversion(name)...)
		vs = append(vs, h.checkWaits(name)...)
		vs = append(vs, h.checkPhases(name)...)
		vs = append(vs, h.checkLeaderReads(name)...)
	}
	vs = append(vs, h.checkOverruns()...)
	vs = append(vs, h.checkObservers()...)
	vs = append(vs, h.checkShapes()...)
	vs = append(vs, h.checkFencedStore()...)
	return vs
}

// names returns every name in the history.
func (h *history) names() []string {
	seen := map[string]bool{}
	for _, c := range h.calls {
		for _, n := range c.call.Names {
			seen[n] = true
		}
	}
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
