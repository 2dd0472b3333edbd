// Package torture is a seeded random driver for dlock: worker processes
// issue random mixes of every public operation on a few contended names
// while the parent injects faults, and a checker verifies the merged
// history for safety (no two owners at once, fences, semaphore capacity)
// and liveness (no waiter left waiting on a free lock, no lock left held
// after its holder let go).
//
// Everything here uses only dlock's public API, so the driver runs
// unchanged against any version of the library with the same API.
//
// Timestamps are wall-clock Unix nanoseconds: every process of a run is on
// the same machine and reads the same clock.
package torture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
)

// Event kinds. Workers write everything but the fault and process events,
// which the parent records.
const (
	kCall      = "call"    // an acquire is about to be called (T before the call)
	kGrant     = "grant"   // it returned a lease (T just after it returned; EK: what Err() said right after, "" nil)
	kFail      = "fail"    // it returned an error (T after)
	kBelief    = "belief"  // Err() returned nil; T was taken just before the call
	kLost      = "lost"    // Err() returned an error (T after)
	kExtCall   = "extcall" // Extend(D) about to be called
	kExt       = "ext"     // Extend returned (EK empty: ok)
	kUCall     = "ucall"   // Unlock about to be called (Msg says with which context)
	kUnlock    = "unlock"  // Unlock returned (EK empty: ok)
	kAbandon   = "abandon" // the worker gives the lease up without a successful Unlock
	kClose     = "close"   // Client.Close of client Client: T call, End return
	kFatal     = "fatal"   // a panic or an impossible result inside a worker
	kQuiet     = "quiet"   // the worker stopped all operations and released what it held
	kFault     = "fault"   // parent: a fault from T to End (Msg: what)
	kSpawn     = "spawn"   // parent: worker incarnation W started
	kKill      = "kill"    // parent: worker incarnation W was sent SIGKILL at T
	kExit      = "exit"    // parent: worker incarnation W exited (Msg: how)
	kProbeFail = "probefail"
	// Elections. A Campaign is an acquire (call, grant with the term as
	// its fence, fail), a Resign an Unlock (ucall, unlock).
	kLeader  = "leader"  // Election.Leader returned (St: called; F: the term, 0 none; M: the value; Lease: the reader's own leadership, when Err() was nil right after)
	kObserve = "observe" // an Observe channel sent a state (G: the observer; F: the term, 0 nobody leads; M: the value)
)

// Event is one line of the history.
type Event struct {
	T       int64    `json:"t"`
	K       string   `json:"k"`
	W       string   `json:"w,omitempty"`  // worker incarnation, "parent" or "probe"
	G       int      `json:"g,omitempty"`  // goroutine within the worker
	Op      int64    `json:"op,omitempty"` // acquire call id (per worker)
	Lease   int64    `json:"ls,omitempty"` // lease id (per worker)
	Client  string   `json:"c,omitempty"`  // dlock Client id within the worker
	Names   []string `json:"n,omitempty"`
	Sides   []string `json:"sd,omitempty"`  // "w" or "r" per name ("" for others)
	Owners  []string `json:"o,omitempty"`   // token per name
	Fences  []int64  `json:"f,omitempty"`   // fence per name
	TTLs    []int64  `json:"ttl,omitempty"` // lease TTL per name, µs
	Permits int      `json:"p,omitempty"`
	Wait    bool     `json:"wt,omitempty"` // Lock (true) or TryLock
	Reent   bool     `json:"re,omitempty"` // re-entry through a lease's context
	Fixed   bool     `json:"fx,omitempty"` // WithLease
	Timeout int64    `json:"to,omitempty"` // µs; 0: none
	DL      int64    `json:"dl,omitempty"` // call: the ctx's deadline (unix ns), 0: none
	St      int64    `json:"st,omitempty"` // grant/fail: when the call was made (after the call event was written)
	D       int64    `json:"d,omitempty"`  // Extend duration, µs; a clock fault's: the time the server's clock lost, µs (negative: gained)
	EK      string   `json:"ek,omitempty"` // error class (see errKind)
	Err     string   `json:"e,omitempty"`
	Scn     string   `json:"sc,omitempty"` // scenario
	End     int64    `json:"end,omitempty"`
	Msg     string   `json:"m,omitempty"`
	// Hold: a call made through contexts that carry leases (the deadlock
	// shapes): each carried lease as "name|side|token" (token "" for a
	// leadership, whose token the API does not give).
	Hold []string `json:"hd,omitempty"`
	// Cycle: a fail with ErrDeadlock, the *DeadlockError's cycle as JSON
	// (dlCycle).
	Cycle string `json:"cy,omitempty"`
}

func (e Event) String() string {
	b, _ := json.Marshal(e)
	return string(b)
}

// errKind classifies an error returned by dlock for the history.
func errKind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, dlock.ErrInvalidArgument):
		return "invalid"
	case errors.Is(err, dlock.ErrNoLeader):
		return "noleader"
	case errors.Is(err, dlock.ErrClosed):
		return "closed"
	case errors.Is(err, dlock.ErrUnlocked):
		return "unlocked"
	case errors.Is(err, dlock.ErrLeaseLost):
		return "lost"
	case errors.Is(err, dlock.ErrNotHeld):
		return "notheld"
	case errors.Is(err, dlock.ErrDeadlock):
		return "deadlock"
	case errors.Is(err, dlock.ErrNotObtained) &&
		(errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return "ctx"
	case errors.Is(err, dlock.ErrNotObtained):
		return "notobtained"
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return "ctxraw"
	}
	return "redis"
}

// emitter writes events as JSON lines, one write(2) per event so that a
// SIGKILL never leaves half a line, and events written before it survive
// in the pipe.
type emitter struct {
	mu sync.Mutex
	w  io.Writer
	id string
}

func (em *emitter) emit(e Event) {
	if e.T == 0 {
		e.T = now()
	}
	e.W = em.id
	b, err := json.Marshal(e)
	if err != nil {
		panic(fmt.Sprintf("torture: marshal event: %v", err))
	}
	b = append(b, '\n')
	em.mu.Lock()
	_, _ = em.w.Write(b)
	em.mu.Unlock()
}

func now() int64 { return time.Now().UnixNano() }

func us(d time.Duration) int64 { return d.Microseconds() }

// stderrf prints a diagnostic line of a worker.
func stderrf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}
