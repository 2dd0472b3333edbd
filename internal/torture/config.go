package torture

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The lock names. Few per kind, so that contention is real; each kind has
// names of its own (a Mutex and a FairMutex of one name would share keys).
var (
	mutexNames = []string{"m0", "m1", "m2"} // short TTLs, every operation
	extNames   = []string{"x0", "x1"}       // Extend races against renewals
	fairNames  = []string{"f0", "f1"}
	rwNames    = []string{"rw0", "rw1"}
	semNames   = []string{"s0", "s1"}
	elecNames  = []string{"e0", "e1"} // elections: short and long leases, every operation
	// quorumNames are RedLock Mutexes on the quorum nodes (issue 23).
	quorumNames = []string{"q0", "q1"}
	// longNames are the names of 4-32 KiB the blockedwrite fault's calls
	// take (so that a few calls fill a connection's socket buffers),
	// recorded by their alias: the alias, a dot, then padding (realName).
	longNames = map[string]int{"mL0": 32 << 10, "mL1": 4 << 10, "fL0": 32 << 10}
)

// realNames are the long names by alias (longNames).
var realNames = func() map[string]string {
	m := map[string]string{}
	for a, size := range longNames {
		m[a] = a + "." + strings.Repeat("z", size-len(a)-1)
	}
	return m
}()

// realName is the name a recorded name stands for: a long name's alias
// stands for the long name, any other name for itself.
func realName(alias string) string {
	if n, ok := realNames[alias]; ok {
		return n
	}
	return alias
}

// aliasOf is the name recorded for a name dlock reports (a lease part's
// Name): a long name's alias, or the name itself.
func aliasOf(name string) string {
	if len(name) > 64 {
		if a, _, ok := strings.Cut(name, "."); ok {
			if _, long := longNames[a]; long {
				return a
			}
		}
	}
	return name
}

// rwStreamName is the RWMutex of the rwstream scenario.
const rwStreamName = "rws"

// semCap is the capacity of each semaphore (fixed for the whole run).
var semCap = map[string]int{"s0": 2, "s1": 3, "sD0": 2, "sC0": 2}

// queueTTL is the queue TTL of every waiter (each registers in its lock's
// queue): a dead waiter stalls its queue for at most 4/3 of it.
const queueTTL = 600 * time.Millisecond

// relayTTL bounds the TTL of the relay scenario's names: long, so that a
// lost wake-up shows as a wait of seconds.
const (
	relayTTLMin = 5 * time.Second
	relayTTLMax = 9 * time.Second
)

// closeTTL bounds the TTL of the close scenario's lock: long enough that
// a lock left held by Client.Close shows, short enough not to hold the
// driver up for long when it does.
const (
	closeTTLMin = 3 * time.Second
	closeTTLMax = 4 * time.Second
)

// prefix is the dlock key prefix of every Client of a run.
const prefix = "tt"

// relayName is name j of driver goroutine g of worker slot s for the
// scenarios that measure hand-offs: private to one goroutine, so that no
// other traffic hides a lost wake-up (another release would wake the
// waiter that missed its own).
func relayName(slot, j, g int) string { return fmt.Sprintf("lv%d.%d.%d", slot, j, g) }

// resetName is name i of the reset fault's burst in worker slot s: a
// Mutex (mR…) or a FairMutex (fR…), private to the slot.
func resetName(slot, i int) string {
	if i%2 == 1 {
		return fmt.Sprintf("fR%d.%d", slot, i)
	}
	return fmt.Sprintf("mR%d.%d", slot, i)
}

// lockKind is the kind of lock a name is used as.
func lockKind(name string) string {
	switch {
	case strings.HasPrefix(name, "lv"), strings.HasPrefix(name, "m"), strings.HasPrefix(name, "x"):
		return "mutex"
	case strings.HasPrefix(name, "f"):
		return "fair"
	case strings.HasPrefix(name, "rw"):
		return "rw"
	case strings.HasPrefix(name, "s"):
		return "sem"
	case strings.HasPrefix(name, "e"): // e0, e1, and the handoff fault's ehK
		return "election"
	case strings.HasPrefix(name, "q"):
		return "quorum"
	}
	return "?"
}

// allNames returns every name a run may use, for the final probe.
func allNames(slots, goroutines int) []string {
	var out []string
	out = append(out, mutexNames...)
	out = append(out, extNames...)
	out = append(out, fairNames...)
	out = append(out, rwNames...)
	out = append(out, semNames...)
	out = append(out, elecNames...)
	out = append(out, quorumNames...)
	out = append(out, dlOrdered...)
	out = append(out, dlCycle...)
	out = append(out, keys(longNames)...)
	for s := range slots {
		for i := range resetBurstGoroutines {
			out = append(out, resetName(s, i))
		}
	}
	out = append(out, rwStreamName)
	for s := range slots {
		for g := range goroutines {
			out = append(out, relayName(s, 0, g+1), relayName(s, 1, g+1), relayName(s, 2, g+1))
		}
	}
	return out
}

// scenarios a worker goroutine picks from, with default weights.
var defaultWeights = map[string]int{
	"mix":           40, // one random operation on the shared names
	"relay":         16, // hand-offs on a long-TTL private name (lost wake-ups)
	"relaycancel":   10, // the same, after Lock calls that gave up at once on the same Client
	"close":         3,  // Client.Close while holding, with a waiter on another Client
	"extend":        15, // Extend to a long d racing the watchdog's renewal
	"unlock":        8,  // Unlock with an ended context, then again or not
	"waiter":        8,  // a long wait on a shared name
	"reopen":        1,  // Client.Close and a new Client
	"lockall":       6,  // LockAll over 2-3 locks
	"shortctx":      6,  // Lock/TryLock/Acquire with a 100-300 ms ctx on the Client without ContextTimeoutEnabled
	"election":      12, // 1-3 candidates Campaign on a shared election; the leader works, Proclaims, reads, resigns
	"nested":        8,  // holds nested through a lease's context on every primitive, released in any order (issue 23)
	"mixedopts":     6,  // per-call QueueTTL/TTL/WithLease mixed on one name; FairMutex arrival-order rounds (issue 23)
	"latch":         4,  // latches reused across phases: TrySetCount, CountDown(Once) retried, Wait (issue 23)
	"deadlock":      5,  // holding random locks of every kind, wait for more through the leases' contexts, in one global order: no ErrDeadlock (shapes_deadlock.go)
	"deadlockcycle": 4,  // the same in random orders: cycles; each ErrDeadlock names a real cycle, one victim each
	"redlock":       6,  // RedLock Mutexes on 3 quorum nodes, through proxies qpart cuts; qrestart restarts a node empty (issue 23)
	// rwstream is a switch, not a weight: > 0 starts, in every worker, a
	// stream of RWMutex writers and readers looping on one name beside
	// the driver goroutines (2 writers and 4 readers with 3 workers).
	"rwstream": 1,
	// observe is a switch too: > 0 starts, in every worker, an observer
	// of one election (Observe) that records every state it is sent.
	"observe": 1,
}

// fault kinds the parent injects, with default weights.
var defaultFaults = map[string]int{
	"pubsub":  5, // CLIENT KILL TYPE pubsub
	"normal":  1, // CLIENT KILL TYPE normal
	"flush":   1, // SCRIPT FLUSH
	"cpause":  1, // CLIENT PAUSE
	"spause":  1, // SIGSTOP/SIGCONT of redis-server
	"restart": 1, // kill -9 and restart with AOF
	"stop":    2, // SIGSTOP/SIGCONT of a worker
	"kill":    2, // SIGKILL of a worker (respawned)
	// The worst moments (TESTING.md): a hand-off that arrives late, calls
	// in flight while the server stalls for seconds.
	"handoff":  3, // a waiter's process SIGSTOPped past its place and TTL while the holder hands it the lock (or the leadership); a third party takes it
	"waitstop": 1, // SIGSTOP of a worker with a Lock waiting, past that Lock's TTL and the queue TTL
	"holdstop": 0, // SIGSTOP of a worker just granted an rwstream read hold, past its TTL (off by default: a lead for the soak's "two owners at once on rws")
	"stall":    2, // DEBUG SLEEP, CLIENT PAUSE ALL or SIGSTOP of redis-server for 1-2 s
	// Commands that arrive late (issue 23): the proxy in front of the
	// server holds the bytes of some connections for 150 ms-3 s, their
	// clients give up (and slot 2's go-redis re-sends on a new
	// connection), then the held commands reach the server, in order.
	"late": 3,
	// The RedLock world (issue 23, finding 8): a quorum node cut off
	// from some workers, or killed, kept out past every quorum TTL (the
	// delayed-restart rule) and restarted empty. Either may outlast the
	// faults after it, so partitions and restarts overlap.
	"qpart":    2,
	"qrestart": 1,
	"qsplit":   1, // the finding's order, scripted: a cut, c cut, b restarted empty, a back, c back
	// Issue 45: a restarting load balancer resets connections after the
	// server ran a command and before its reply (go-redis and dlock's
	// own connections send it again), and a path or a server that stops
	// reading until a client's write blocks on full socket buffers.
	// reset found nothing on the code of its branch and is on;
	// blockedwrite is off until the fix of a blocked write lands (it
	// finds ctx overruns at once: README, "What it found"); on with
	// DLOCK_TORTURE_FAULTS=+blockedwrite (2 once fixed).
	"reset":        2,
	"blockedwrite": 0,
	// The server's clock (issue 33; faults.go, clockKinds): not picked by
	// the injector above but by one of its own, every 1-5 s, beside it,
	// by these weights (all 0: no clock faults, and no shim).
	"clock":        1, // the clock stands still 0.1-1.5 s then runs on behind, or steps back 0.1-1 s
	"clockforward": 0, // a step forward 0.1-1.5 s: two owners by design (off; on to show the checker sees them)
}

// weights parses "a=1,b=2" (or "a,b": weight 1 each; "none": empty) over
// defaults: a list replaces the defaults entirely, a list after a "+"
// ("+a=2,b=0", or "+a=2,+b=0") changes only the weights it names.
func weights(spec string, defaults map[string]int) (map[string]int, error) {
	if spec == "" {
		return defaults, nil
	}
	out := map[string]int{}
	if spec == "none" {
		return out, nil
	}
	if rest, ok := strings.CutPrefix(spec, "+"); ok {
		for k, v := range defaults {
			out[k] = v
		}
		spec = rest
	}
	for _, f := range strings.Split(spec, ",") {
		// "+a,+b" reads as "+a,b": a "+" on each name changes nothing.
		k, v, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(f), "+"), "=")
		if _, known := defaults[k]; !known {
			return nil, fmt.Errorf("unknown name %q (want one of %v)", k, keys(defaults))
		}
		n := defaults[k]
		if !ok && n <= 0 {
			n = 1 // named: on, even if off by default
		}
		if ok {
			var err error
			if n, err = strconv.Atoi(v); err != nil {
				return nil, fmt.Errorf("%q: %v", f, err)
			}
		}
		out[k] = n
	}
	return out, nil
}

func keys(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// pick returns a key of w with probability proportional to its weight
// (keys in sorted order, so that a seed picks the same thing every time).
func pick(rng *rand.Rand, w map[string]int) string {
	total := 0
	ks := keys(w)
	for _, k := range ks {
		total += w[k]
	}
	if total <= 0 {
		return ""
	}
	n := rng.IntN(total)
	for _, k := range ks {
		if n < w[k] {
			return k
		}
		n -= w[k]
	}
	return ""
}

// between returns a duration uniform in [lo, hi].
func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// logBetween returns a duration log-uniform in [lo, hi]: tiny values as
// likely as large ones.
func logBetween(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	f := float64(lo) * math.Pow(float64(hi)/float64(lo), rng.Float64())
	return time.Duration(f)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
