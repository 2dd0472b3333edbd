package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/rueidisdlock"
	"github.com/dlock-go/dlock/valkeydlock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
	"github.com/valkey-io/valkey-go"
)

// BenchmarkOneClient measures what a user's process sees: one process, ONE
// client of each implementation (default options, go-redis' default pool)
// shared by all goroutines, each goroutine on a key of its own, looping an
// uncontended Lock+Unlock. Cases are BenchmarkOneClient/g<G>/<locker> for
// G in oneClientGoroutines and every locker of the table lockers, against
// the one shared redis-server.
//
// Metrics, all over the timed loop only (after connecting and warming up):
//
//   - ns/op: wall time per Lock+Unlock across all goroutines; ops/s its
//     inverse;
//   - allocs/op, B/op (-benchmem or the report): of the whole process,
//     the clients' background goroutines included;
//   - client-us/op: the process's CPU time (getrusage(RUSAGE_SELF), user +
//     sys) per Lock+Unlock; it includes Go's GC and scheduler and the
//     clients' background goroutines, i.e. what the user pays;
//   - server-us/op: the redis-server's CPU time (INFO cpu, used_cpu_user +
//     used_cpu_sys) per Lock+Unlock, read on a connection of its own;
//   - server-reads/op: the reads the server made from client sockets
//     (INFO stats, total_reads_processed) per Lock+Unlock: the socket
//     writes of the clients, pipelined commands counting once;
//   - stalls: Locks of a free key that had not returned after stallAfter
//     and were cancelled and called again (0 for a working lock).
//
// TestOneClientReport (-oneclient) runs the cases in interleaved rounds and
// prints the medians with ratios to the anchors.
func BenchmarkOneClient(b *testing.B) { runCases(b, oneClientCases()) }

// oneClientGoroutines are the parallelisms of BenchmarkOneClient.
var oneClientGoroutines = []int{1, 16, 64}

// A locker is one implementation as BenchmarkOneClient runs it. open
// connects one client to the redis-server at addr, with default options,
// the way the implementation's documentation shows; every goroutine of the
// benchmark shares it.
type locker struct {
	name   string
	anchor bool // one of the locks dlock is measured against
	open   func(addr string) (*lockerClient, error)
}

// lockerClient is one open client of a locker.
type lockerClient struct {
	// forKey returns the Lock+Unlock of key: it takes the free lock and
	// releases it at once, and returns an error if either fails. It is
	// called once per goroutine, before the timed loop, and the result is
	// used by that goroutine only (a redsync Mutex or a dlock Mutex handle
	// is made once per key, as a user keeps one per lock name).
	forKey func(key string) func(ctx context.Context) error
	close  func()
}

// lockers is the table of implementations BenchmarkOneClient compares, in
// table order. To add one, append a locker: a name, an open that connects
// one client to addr, and the Lock+Unlock of a key.
var lockers = []locker{
	{name: "dlock", open: openDlockGoRedis},
	{name: "dlock/rueidis", open: openDlockRueidis},
	{name: "dlock/valkey-go", open: openDlockValkey},
	{name: "redislock", anchor: true, open: openRedislock},
	{name: "redsync", anchor: true, open: openRedsync},
	{name: "rueidislock", anchor: true, open: openRueidislock},
}

// dlock on one go-redis client with default options; the Mutex with the
// 10 s lease every implementation gets here (auto-renewed, as by default;
// no renewal falls due in a run).
func openDlockGoRedis(addr string) (*lockerClient, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	c, err := dlock.New(rdb)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return &lockerClient{
		forKey: dlockLockUnlock(c),
		close: func() {
			_ = c.Close()
			_ = rdb.Close()
		},
	}, nil
}

// dlockLockUnlock is the Lock+Unlock of a Mutex of c; it serves every dlock
// backend (the Client is the same whatever carries its commands).
func dlockLockUnlock(c *dlock.Client) func(key string) func(context.Context) error {
	return func(key string) func(context.Context) error {
		m := c.Mutex(key, dlock.WithTTL(lockTTL))
		return func(ctx context.Context) error {
			l, err := m.Lock(ctx)
			if err != nil {
				return fmt.Errorf("lock: %w", err)
			}
			if err := l.Unlock(ctx); err != nil {
				return fmt.Errorf("unlock: %w", err)
			}
			return nil
		}
	}
}

// dlock on one rueidis client with default options (rueidisdlock).
func openDlockRueidis(addr string) (*lockerClient, error) {
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	return openDlockOn(rc, err, rueidisdlock.New)
}

// dlock on one valkey-go client with default options (valkeydlock).
func openDlockValkey(addr string) (*lockerClient, error) {
	vc, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}})
	return openDlockOn(vc, err, valkeydlock.New)
}

// openDlockOn makes a dlock Client on client (made with err) by newClient
// (a driver package's New); closing it closes both.
func openDlockOn[C interface{ Close() }](client C, err error,
	newClient func(C, ...dlock.Option) (*dlock.Client, error)) (*lockerClient, error) {
	if err != nil {
		return nil, err
	}
	c, err := newClient(client)
	if err != nil {
		client.Close()
		return nil, err
	}
	return &lockerClient{forKey: dlockLockUnlock(c), close: func() { _ = c.Close(); client.Close() }}, nil
}

// redislock on one go-redis client; Obtain without retries (the key is
// free: a refusal is an error).
func openRedislock(addr string) (*lockerClient, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	c := redislock.New(rdb)
	return &lockerClient{
		forKey: func(key string) func(context.Context) error {
			return func(ctx context.Context) error {
				l, err := c.Obtain(ctx, key, lockTTL, nil)
				if err != nil {
					return fmt.Errorf("lock: %w", err)
				}
				if err := l.Release(ctx); err != nil {
					return fmt.Errorf("unlock: %w", err)
				}
				return nil
			}
		},
		close: func() { _ = rdb.Close() },
	}, nil
}

// redsync on one go-redis pool (quorum 1); a Mutex per key (it is not
// safe for concurrent use), with its default tries.
func openRedsync(addr string) (*lockerClient, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	rs := redsync.New(goredis.NewPool(rdb))
	return &lockerClient{
		forKey: func(key string) func(context.Context) error {
			m := rs.NewMutex(key, redsync.WithExpiry(lockTTL))
			return func(ctx context.Context) error {
				if err := m.LockContext(ctx); err != nil {
					return fmt.Errorf("lock: %w", err)
				}
				ok, err := m.UnlockContext(ctx)
				if err == nil && !ok {
					err = errors.New("released nothing")
				}
				if err != nil {
					return fmt.Errorf("unlock: %w", err)
				}
				return nil
			}
		},
		close: func() { _ = rdb.Close() },
	}, nil
}

// rueidislock on one rueidis client (the Locker makes it from
// ClientOption), one key per lock (KeyMajority 1), NoLoopTracking as its
// README advises for Redis >= 7.0.5. Unlock is the returned cancel, which
// deletes the key and waits for that.
func openRueidislock(addr string) (*lockerClient, error) {
	lk, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption:   rueidis.ClientOption{InitAddress: []string{addr}},
		KeyMajority:    1,
		KeyValidity:    lockTTL,
		NoLoopTracking: true,
	})
	if err != nil {
		return nil, err
	}
	return &lockerClient{
		forKey: func(key string) func(context.Context) error {
			return func(ctx context.Context) error {
				_, cancel, err := lk.WithContext(ctx, key)
				if err != nil {
					return fmt.Errorf("lock: %w", err)
				}
				cancel()
				return nil
			}
		},
		close: lk.Close,
	}, nil
}

func oneClientCases() []benchCase {
	var cs []benchCase
	for _, g := range oneClientGoroutines {
		for _, lk := range lockers {
			cs = append(cs, benchCase{"OneClient", fmt.Sprintf("g%d", g), lk.name, oneClient(lk, g)})
		}
	}
	return cs
}

// oneClient returns the benchmark of lk with g goroutines on one client.
func oneClient(lk locker, g int) func(*testing.B) {
	return func(b *testing.B) {
		addr := serverAddr(b)
		label := newKey("oneclient")
		ops := make([]func(context.Context) error, g)
		var lc *lockerClient
		for i := range ops {
			if lc == nil || *oneClientPerGoroutine {
				var err error
				if lc, err = lk.open(addr); err != nil {
					fatalf(b, "%s: open: %v", lk.name, err)
				}
				defer lc.close()
			}
			ops[i] = lc.forKey(fmt.Sprintf("%s:%s:%d", label, lk.name, i))
		}

		// One context for every call of the run, one that can end like a
		// request's (-oneclient.ctx: see newCtx); a stall cancels it and
		// the stuck calls are made again with the next. dlock runs each
		// round trip on a goroutine of its own when the ctx can end
		// (internal/transport): context.Background() is cheaper for it.
		ctxs := newRunCtx()
		defer ctxs.cancel()
		since := make([]atomic.Int64, g)
		done := make(chan struct{})
		stalls := longWaitWatch(since, done, ctxs.unstick)
		defer close(done)
		call := func(i int) error {
			slot := &since[i]
			slot.Store(time.Now().UnixNano())
			defer slot.Store(0)
			for {
				ctx := ctxs.current()
				err := ops[i](ctx)
				if err != nil && ctx.Err() != nil {
					continue // cut short by a stall: again
				}
				return err
			}
		}

		// Warm up: every goroutine at once, so that pools hold as many
		// connections as the run will use and scripts are loaded.
		var wg sync.WaitGroup
		for i := range g {
			wg.Go(func() {
				for range 3 {
					if err := call(i); err != nil {
						errorf(b, "%s: warm-up: %v", lk.name, err)
						return
					}
				}
			})
		}
		wg.Wait()
		if b.Failed() {
			return
		}

		admin := redis.NewClient(&redis.Options{Addr: addr})
		defer admin.Close()
		srv0 := serverCPU(b, admin)
		reads0 := serverReads(b, admin)
		cli0 := processCPU()
		busy0 := machineBusy()
		stalls0 := stalls()
		b.ReportAllocs()
		b.ResetTimer()
		if g == 1 {
			for i := 0; i < b.N; i++ {
				if err := call(0); err != nil {
					fatalf(b, "%s: %v", lk.name, err)
				}
			}
		} else {
			var left atomic.Int64
			left.Store(int64(b.N))
			for i := range g {
				wg.Go(func() {
					for left.Add(-1) >= 0 {
						if err := call(i); err != nil {
							errorf(b, "%s: %v", lk.name, err)
							return
						}
					}
				})
			}
			wg.Wait()
		}
		b.StopTimer()
		cli := processCPU() - cli0
		srv := serverCPU(b, admin) - srv0
		reads := serverReads(b, admin) - reads0 - 2 // the two INFO calls since reads0
		busy := machineBusy() - busy0
		n := float64(b.N)
		b.ReportMetric(perSecond(b, b.N), "ops/s")
		b.ReportMetric(float64(cli.Microseconds())/n, "client-us/op")
		b.ReportMetric(float64(srv.Microseconds())/n, "server-us/op")
		b.ReportMetric(float64(reads)/n, "server-reads/op")
		b.ReportMetric(float64(stalls()-stalls0), "stalls")
		if busy0 >= 0 && b.Elapsed() > 0 {
			// CPU the machine spent on anything but this process and the
			// server (other processes, interrupts), in cores: a run
			// with much of it was measured on a busy machine.
			b.ReportMetric(max(busy-cli-srv, 0).Seconds()/b.Elapsed().Seconds(), "others-cores")
		}
	}
}

// runCtx is the context of every call of a run: one, replaced when unstick
// cancels it.
type runCtx struct {
	p atomic.Pointer[ctxCancel]
}

type ctxCancel struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// oneClientPerGoroutine gives every goroutine a client of its own instead:
// not what BenchmarkOneClient is for (a process shares one client), but
// how a harness of one client per worker measures.
var oneClientPerGoroutine = flag.Bool("oneclient.pergoroutine", false, "BenchmarkOneClient: open a client per goroutine instead of one for all (for comparison with such harnesses)")

var oneClientCtx = flag.String("oneclient.ctx", "cancel", "BenchmarkOneClient: the context of the calls: cancel (one cancellable context for the run), deadline (the same with a deadline 2 min away) or background (context.Background(): a stalled call is never cut short)")

func newRunCtx() *runCtx {
	r := &runCtx{}
	r.p.Store(newCtx())
	return r
}

func newCtx() *ctxCancel {
	switch *oneClientCtx {
	case "background":
		return &ctxCancel{context.Background(), func() {}}
	case "deadline":
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		return &ctxCancel{ctx, cancel}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &ctxCancel{ctx, cancel}
}

func (r *runCtx) current() context.Context { return r.p.Load().ctx }

// unstick cancels the calls made so far; later calls get a fresh context.
func (r *runCtx) unstick() {
	r.p.Swap(newCtx()).cancel()
}

func (r *runCtx) cancel() { r.p.Load().cancel() }

// processCPU is this process's CPU time so far, user + system, all
// threads (getrusage RUSAGE_SELF).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// machineBusy is the CPU time all CPUs of the machine have spent not
// idle so far (/proc/stat; 10 ms resolution), or -1 where it cannot be
// read.
func machineBusy() time.Duration {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return -1
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return -1
	}
	var busy int64
	for i, v := range f[1:] {
		x, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return -1
		}
		// user nice system idle iowait irq softirq steal guest guest_nice;
		// guest time is counted in user already.
		if i != 3 && i != 4 && i < 8 {
			busy += x
		}
	}
	const userHZ = 100 // USER_HZ, 100 on every Linux port Go runs on
	return time.Duration(busy) * (time.Second / userHZ)
}

// serverReads is how many reads from client sockets the redis-server
// behind c has made so far (INFO stats: total_reads_processed): one per
// batch of commands a client wrote that the server read at once, so per
// Lock+Unlock it counts the socket writes clients made, pipelined
// commands together.
func serverReads(b *testing.B, c *redis.Client) int64 {
	b.Helper()
	s, err := c.Info(context.Background(), "stats").Result()
	if err != nil {
		fatalf(b, "INFO stats: %v", err)
	}
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_reads_processed:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				fatalf(b, "INFO stats: %s: %v", line, err)
			}
			return n
		}
	}
	fatalf(b, "INFO stats: no total_reads_processed")
	return 0
}

// serverCPU is the CPU time the redis-server behind c has used so far,
// user + system (INFO cpu: used_cpu_user + used_cpu_sys, microsecond
// resolution), its background threads included.
func serverCPU(b *testing.B, c *redis.Client) time.Duration {
	b.Helper()
	s, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		fatalf(b, "INFO cpu: %v", err)
	}
	var total float64
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				fatalf(b, "INFO cpu: %s: %v", line, err)
			}
			total += x
		}
	}
	return time.Duration(total * float64(time.Second))
}
