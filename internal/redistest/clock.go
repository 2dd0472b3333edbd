package redistest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// The server's clock. A server started with Options.ShimClock runs under
// an LD_PRELOAD library (clockShimSource, in C) that moves its wall clock —
// clock_gettime(CLOCK_REALTIME and CLOCK_REALTIME_COARSE), gettimeofday
// and time — by what a file in its directory says; its monotonic clocks
// are untouched. Redis answers TIME and expires keys by that wall clock,
// so a test can freeze it (SetClock(Frozen(t))), step it forward past a
// TTL or back (StepClock), while the server runs. libfaketime cannot do
// this: redis-server 7.0's allocator reads the clock before anything is
// initialised, and libfaketime aborts there.

// ErrNoCompiler is returned by Start for Options.ShimClock when no C
// compiler (cc) is found in PATH: the shim is compiled by the test.
// StartT skips the test then, and says so.
var ErrNoCompiler = errors.New("redistest: the server clock shim needs a C compiler (cc) in PATH")

const (
	clockFileName = "clock"
	shimName      = "clockshim.so"
	// shimReload is how long the shim may keep using what it read of the
	// clock file (RELOAD_NS in clockShimSource), with a margin.
	shimReload = 3 * time.Millisecond
)

// Clock is what a shimmed server's wall clock reads: the real clock moved
// by an offset, or one instant that does not move. The zero Clock is the
// real clock.
type Clock struct {
	frozen bool
	at     time.Time     // frozen: the instant
	offset time.Duration // not frozen: added to the real clock
}

// Frozen is a clock that stands still at t.
func Frozen(t time.Time) Clock { return Clock{frozen: true, at: t} }

// Offset is the real clock moved by d (back when d < 0).
func Offset(d time.Duration) Clock { return Clock{offset: d} }

// Step is c moved by d: a frozen clock stays frozen, d later.
func (c Clock) Step(d time.Duration) Clock {
	if c.frozen {
		c.at = c.at.Add(d)
	} else {
		c.offset += d
	}
	return c
}

// Now is what the clock reads now.
func (c Clock) Now() time.Time {
	if c.frozen {
		return c.at
	}
	return time.Now().Add(c.offset)
}

// String describes the clock.
func (c Clock) String() string {
	if c.frozen {
		return "frozen at " + c.at.UTC().Format(time.RFC3339Nano)
	}
	return "real " + c.offset.String()
}

// line is the clock file's content (see clockShimSource).
func (c Clock) line() string {
	if c.frozen {
		return "f " + strconv.FormatInt(c.at.UnixMicro(), 10) + "\n"
	}
	return "o " + strconv.FormatInt(c.offset.Microseconds(), 10) + "\n"
}

// buildShim compiles the clock shim into dir and returns the library's
// path.
func buildShim(dir string) (string, error) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoCompiler, err)
	}
	src := filepath.Join(dir, "clockshim.c")
	if err := os.WriteFile(src, []byte(clockShimSource), 0o644); err != nil {
		return "", fmt.Errorf("redistest: %w", err)
	}
	lib := filepath.Join(dir, shimName)
	out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-o", lib, src, "-ldl").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("redistest: compiling the clock shim: %v\n%s", err, out)
	}
	return lib, nil
}

// shimEnv prepares s to run under the clock shim: compiles it into s.dir,
// writes the real clock to the clock file, and returns the environment the
// server runs with.
func (s *Server) shimEnv() ([]string, error) {
	lib, err := buildShim(s.dir)
	if err != nil {
		return nil, err
	}
	s.clockFile = filepath.Join(s.dir, clockFileName)
	if err := writeClock(s.clockFile, Clock{}); err != nil {
		return nil, err
	}
	return []string{"LD_PRELOAD=" + lib, "DLOCK_CLOCK_FILE=" + s.clockFile}, nil
}

// writeClock replaces the clock file at once (a rename), so that the shim
// reads either the old line or the new, never part of one.
func writeClock(path string, c Clock) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(c.line()), 0o644); err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	return nil
}

// SetClock sets the wall clock of a server started with Options.ShimClock.
// When it returns, every reading of the server's clock is c's: the shim
// reads the file again within a millisecond, and SetClock waits a little
// longer than that (the shim cannot tell it; the bound is its own). It
// fails for a server started without the shim.
func (s *Server) SetClock(c Clock) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.clockFile == "" {
		return errors.New("redistest: SetClock on a server started without ShimClock")
	}
	if err := writeClock(s.clockFile, c); err != nil {
		return err
	}
	s.clock = c
	time.Sleep(shimReload)
	return nil
}

// StepClock moves the server's wall clock by d (back when d < 0) from
// where it is: SetClock(ServerClock().Step(d)).
func (s *Server) StepClock(d time.Duration) error {
	return s.SetClock(s.ServerClock().Step(d))
}

// ServerClock is the clock the server was last set to (the real clock
// until SetClock).
func (s *Server) ServerClock() Clock {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clock
}
