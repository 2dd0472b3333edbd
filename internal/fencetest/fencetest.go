// Package fencetest is what the guards' tests (fence/redisfence,
// fence/pgfence) share for the scene of Kleppmann's fencing argument: a
// lock of each kind that hands out fences, taken the same way, and a
// helper process (the test binary run again) that holds one, is stopped
// and continued by the test, and writes when told.
package fencetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fence"
)

// Kinds are the locks that hand out fences.
var Kinds = []string{"mutex", "fair", "rwmutex", "semaphore", "election"}

// Hold is a hold with a fence: a Lease, or a Leadership.
type Hold interface {
	fence.Token
	Unlock(context.Context) error
}

type leadership struct{ *dlock.Leadership }

func (l leadership) Unlock(ctx context.Context) error { return l.Resign(ctx) }

// Acquire takes kind's lock called name on c with a lease of ttl.
func Acquire(ctx context.Context, c *dlock.Client, kind, name string, ttl time.Duration) (Hold, error) {
	opt := dlock.WithTTL(ttl)
	switch kind {
	case "mutex":
		return c.Mutex(name, opt).Lock(ctx)
	case "fair":
		return c.FairMutex(name, opt).Lock(ctx)
	case "rwmutex":
		return c.RWMutex(name, opt).Lock(ctx)
	case "semaphore":
		return c.Semaphore(name, 1, opt).Acquire(ctx, 1)
	case "election":
		ld, err := c.Election(name, opt).Campaign(ctx, "me")
		if err != nil {
			return nil, err
		}
		return leadership{ld}, nil
	}
	return nil, fmt.Errorf("kind %q", kind)
}

// Holder is the helper process's side: it takes kind's lock name on c
// with a 300 ms lease, says "held <fence>", then at each "write" line
// calls write with the hold — whatever its lease says, as a paused
// process that resumes would — and says "wrote ok", "wrote stale" or
// "wrote <error>"; it returns at "quit" (status 0) or a failure (1).
func Holder(c *dlock.Client, kind, name string, write func(fence.Token) error) int {
	l, err := Acquire(context.Background(), c, kind, name, 300*time.Millisecond)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("held", l.Fence())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "write":
			switch err := write(l); {
			case err == nil:
				fmt.Println("wrote ok")
			case errors.Is(err, fence.ErrStale):
				fmt.Println("wrote stale")
			default:
				fmt.Println("wrote", strings.ReplaceAll(err.Error(), "\n", " "))
			}
		case "quit":
			return 0
		}
	}
	return 0
}

// Helper is the test's side of a helper process.
type Helper struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

// Start runs the test binary again with env added (the variable that
// makes its TestMain call Holder); the test's cleanup kills it.
func Start(t *testing.T, env ...string) *Helper {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return &Helper{cmd: cmd, in: in, out: bufio.NewScanner(out)}
}

// Signal sends the helper s (SIGSTOP, SIGCONT).
func (h *Helper) Signal(t *testing.T, s syscall.Signal) {
	t.Helper()
	if err := h.cmd.Process.Signal(s); err != nil {
		t.Fatal(err)
	}
}

// Send writes a line to the helper.
func (h *Helper) Send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(h.in, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

// Expect reads the helper's next line, which must start with word, and
// returns the rest.
func (h *Helper) Expect(t *testing.T, word string) string {
	t.Helper()
	if !h.out.Scan() {
		t.Fatalf("the helper ended before %q", word)
	}
	rest, ok := strings.CutPrefix(h.out.Text(), word+" ")
	if !ok {
		t.Fatalf("the helper said %q; want %q", h.out.Text(), word)
	}
	return rest
}

// Wait waits for the helper to exit (after "quit").
func (h *Helper) Wait(t *testing.T) {
	t.Helper()
	if err := h.cmd.Wait(); err != nil {
		t.Errorf("the helper: %v", err)
	}
}

// Store is what the scene writes to, through its guard.
type Store struct {
	// Env is the helper's environment beyond its kind: where it finds
	// Redis, the store and what to write (Holder's write reads it).
	Env []string
	// Write is the new owner's fenced write of "new".
	Write func(ctx context.Context, h Hold) error
	// Data is what the store holds now; Fence the guard's record.
	Data  func(ctx context.Context) (string, error)
	Fence func(ctx context.Context) (int64, error)
}

// PausedHolder plays the scene of Kleppmann's fencing argument for kind's
// lock called name: a helper process takes it (Holder) and is stopped
// (SIGSTOP) past its lease; c takes the lock (waiting out that lease) and
// writes "new" through the guard; the helper is continued and writes: its
// write must be refused as stale, the data stay "new", and the record be
// the new owner's fence.
func PausedHolder(t *testing.T, c *dlock.Client, kind, name string, s Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h := Start(t, s.Env...)
	f1 := h.Expect(t, "held")

	h.Signal(t, syscall.SIGSTOP)
	l, err := Acquire(ctx, c, kind, name, time.Minute) // waits out the stopped holder's lease
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, l); err != nil {
		t.Fatalf("the new owner's write (fence %d, the stopped one's %s): %v", l.Fence(), f1, err)
	}

	h.Signal(t, syscall.SIGCONT)
	h.Send(t, "write")
	if got := h.Expect(t, "wrote"); got != "stale" {
		t.Fatalf("the resumed holder's write: %q; want stale", got)
	}
	if v, err := s.Data(ctx); err != nil || v != "new" {
		t.Fatalf("the data is %q (%v); want the new owner's", v, err)
	}
	if f, err := s.Fence(ctx); err != nil || f != l.Fence() {
		t.Fatalf("record %d (%v); want the new owner's fence %d", f, err, l.Fence())
	}
	_ = l.Unlock(ctx)
	h.Send(t, "quit")
	h.Wait(t)
}
