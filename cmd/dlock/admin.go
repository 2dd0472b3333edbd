package main

import (
	"context"
	"fmt"
	"github.com/spf13/pflag"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// The operator's commands (inspect, ls, unlock --force, top) read and
// change locks through the library's inspection API (Client.Inspect,
// Locks, ForceUnlock); this file holds their command lines and
// connection, report.go and jsonout.go what they print, top.go the live
// view, leader.go the command that reads and follows an election.

// Usage lines of the operator's commands.
const (
	inspectSynopsis = "dlock inspect [--redis URL] [--tls-*] [--prefix P] [--kind K] [--json] NAME"
	lsSynopsis      = "dlock ls [--redis URL] [--tls-*] [--prefix P] [--json] [PATTERN]"
	unlockSynopsis  = "dlock unlock --force [--redis URL] [--tls-*] [--prefix P] [--kind K] NAME"
	// adminTimeout bounds inspect, ls and unlock, connection included,
	// and each refresh of top.
	adminTimeout = 10 * time.Second
)

// kindNames are the values of --kind, for messages.
const kindNames = "mutex (also FairMutex), rwmutex, semaphore, latch or election"

// allKinds are the kinds of lock, in the order they are shown.
var allKinds = []dlock.Kind{dlock.KindMutex, dlock.KindRWMutex, dlock.KindSemaphore, dlock.KindLatch, dlock.KindElection}

// kindFlag is --kind: one kind of lock, or none given (every kind).
type kindFlag struct{ kind dlock.Kind }

// String returns the kind, or "" when not given.
func (k *kindFlag) String() string {
	if k == nil {
		return ""
	}
	return string(k.kind)
}

// Type names the kind of value for -h.
func (k *kindFlag) Type() string { return "kind" }

// Set parses a kind's name; fairmutex is a mutex (they share their locks).
func (k *kindFlag) Set(s string) error {
	switch v := dlock.Kind(strings.ToLower(s)); v {
	case dlock.KindMutex, dlock.KindRWMutex, dlock.KindSemaphore, dlock.KindLatch, dlock.KindElection:
		k.kind = v
	case "fairmutex":
		k.kind = dlock.KindMutex
	default:
		return fmt.Errorf("want %s", kindNames)
	}
	return nil
}

// kinds returns the kind given, or every kind.
func (k kindFlag) kinds() []dlock.Kind {
	if k.kind == "" {
		return allKinds
	}
	return []dlock.Kind{k.kind}
}

// adminFlags are the flags every operator's command has: where Redis is
// and under which prefix the locks are.
type adminFlags struct {
	conn   connFlags
	prefix string
}

// register adds --redis, the TLS flags and --prefix to fs.
func (a *adminFlags) register(fs *pflag.FlagSet) {
	a.conn.register(fs)
	fs.StringVar(&a.prefix, "prefix", dlock.DefaultPrefix, "key `prefix` of the locks")
}

// options checks the prefix and resolves the connection flags (reading
// $DLOCK_REDIS_URL); it does not connect.
func (a *adminFlags) options() (target, error) {
	if err := checkPrefix(a.prefix); err != nil {
		return target{}, err
	}
	return a.conn.options(os.Getenv)
}

// session is a connection to Redis and a library Client on it, for
// inspection: it records no owner information, as it takes no lock.
type session struct {
	rdb redis.UniversalClient
	c   *dlock.Client
}

// connect dials Redis and makes the Client, with opts besides the
// prefix. Close the session when done.
func connect(ctx context.Context, t target, prefix string, opts ...dlock.Option) (*session, error) {
	rdb, _, err := dial(ctx, t)
	if err != nil {
		return nil, err
	}
	c, err := dlock.New(rdb, append([]dlock.Option{dlock.WithPrefix(prefix), dlock.WithoutOwnerInfo()}, opts...)...)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	return &session{rdb: rdb, c: c}, nil
}

// close closes the Client, then the connection.
func (s *session) close() {
	s.c.Close()
	s.rdb.Close()
}

// adminRun connects to t under prefix, bounded by adminTimeout, runs do,
// and returns its status; 1 if Redis cannot be reached.
func adminRun(t target, prefix string, stderr io.Writer, do func(ctx context.Context, s *session) int) int {
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	s, err := connect(ctx, t, prefix)
	if err != nil {
		complain(stderr, "%v", err)
		return exitFail
	}
	defer s.close()
	return do(ctx, s)
}

// exists reports whether Redis has anything of the lock: a holder, a
// waiter, a key with a TTL, a fence issued, a capacity, a count or a
// leader's value.
func exists(l *dlock.LockInfo) bool {
	return l.Held || l.TTL != 0 || l.Fence != 0 || len(l.Waiters) > 0 || l.KeptFor != "" || l.Capacity != 0 ||
		l.Count != 0 || l.Value != ""
}

// lockKeyTypes are the Redis types a lock's own key (LockInfo.Key) may
// have: a Mutex's and an Election's hold is one string (internal/protocol/
// scripts/lib_mutex.lua; a Mutex's is its owner's token alone when taken
// WithoutScripts), a hash in the layout before it (which Inspect reads).
var lockKeyTypes = map[dlock.Kind][]string{
	dlock.KindMutex:     {"none", "hash", "string"},
	dlock.KindRWMutex:   {"none", "hash"},
	dlock.KindSemaphore: {"none", "hash"},
	dlock.KindLatch:     {"none", "string"},
	dlock.KindElection:  {"none", "hash", "string"},
}

// checkKeyType fails when the lock's key holds something that is no
// dlock lock (a name clash under the prefix): unlock must not delete it,
// and inspect must not call it free. An Election's string is a dlock's
// only when Inspect read it as a hold, or as a lock kept for a waiter
// (an Election has no script-free string): any other string is a clash.
func checkKeyType(ctx context.Context, rdb redis.Cmdable, l *dlock.LockInfo) error {
	t, err := rdb.Type(ctx, l.Key).Result()
	if err != nil {
		return fmt.Errorf("%s %q: %w", l.Kind, l.Name, err)
	}
	if !slices.Contains(lockKeyTypes[l.Kind], t) || (l.Kind == dlock.KindElection && t == "string" && !l.Held && l.KeptFor == "") {
		return fmt.Errorf("key %s is a %s, not a dlock %s", l.Key, t, l.Kind)
	}
	return nil
}

// inspectLocks reads the lock name of each kind in kinds; of every kind,
// only those that exist. Each key is checked to be a lock's.
func inspectLocks(ctx context.Context, s *session, name string, kinds []dlock.Kind) ([]*dlock.LockInfo, error) {
	var out []*dlock.LockInfo
	for _, kd := range kinds {
		l, err := s.c.Inspect(ctx, kd, name)
		if err != nil {
			return nil, err
		}
		if len(kinds) > 1 && !exists(l) {
			continue
		}
		if err := checkKeyType(ctx, s.rdb, l); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// oneName checks that fs has exactly one non-empty argument and returns it.
func oneName(fs *pflag.FlagSet) (string, error) {
	if fs.NArg() != 1 || fs.Arg(0) == "" {
		return "", fmt.Errorf("want exactly one lock NAME, got %q", fs.Args())
	}
	return fs.Arg(0), nil
}

// inspectCmd is "dlock inspect": it shows the lock NAME of the kind
// --kind, or of every kind that exists under that name — holders with
// their owners, hold counts, fences and TTLs; waiters in the order they
// will be served; the kind's state — as a report or, with --json, as an
// array of lock objects (see lockJSON). It exits 0 also when no lock is
// called NAME (an empty report; [] in JSON).
func inspectCmd(args []string, stdout, stderr io.Writer) int {
	var (
		a      adminFlags
		kind   kindFlag
		asJSON bool
	)
	fs := newFlags("inspect")
	a.register(fs)
	fs.Var(&kind, "kind", "inspect only the lock of `KIND`: "+kindNames+" (default: every kind that exists)")
	fs.BoolVar(&asJSON, "json", false, "print a JSON array of locks (the schema is in docs/cli.md)")
	if code, ok := parseFlags(fs, inspectSynopsis, args, stdout, stderr); !ok {
		return code
	}
	name, err := oneName(fs)
	if err != nil {
		return usageError(stderr, inspectSynopsis, "%v", err)
	}
	opt, err := a.options()
	if err != nil {
		return usageError(stderr, inspectSynopsis, "%v", err)
	}
	return adminRun(opt, a.prefix, stderr, func(ctx context.Context, s *session) int {
		locks, err := inspectLocks(ctx, s, name, kind.kinds())
		if err != nil {
			complain(stderr, "inspect %q: %v", name, err)
			return exitFail
		}
		if asJSON {
			return printJSON(stdout, stderr, locks)
		}
		if len(locks) == 0 {
			fmt.Fprintf(stdout, "no lock called %q under prefix %q, of any kind\n", name, a.prefix)
			return exitOK
		}
		now := time.Now()
		for i, l := range locks {
			if i > 0 {
				fmt.Fprintln(stdout)
			}
			writeLock(stdout, l, now)
		}
		return exitOK
	})
}

// lsCmd is "dlock ls": it lists the locks under the prefix whose names
// match PATTERN (path.Match syntax; all without one), of every kind, with
// their holders, waiters and TTL, found with SCAN (never KEYS).
func lsCmd(args []string, stdout, stderr io.Writer) int {
	var (
		a      adminFlags
		asJSON bool
	)
	fs := newFlags("ls")
	a.register(fs)
	fs.BoolVar(&asJSON, "json", false, "print a JSON array of locks (the schema is in docs/cli.md)")
	if code, ok := parseFlags(fs, lsSynopsis, args, stdout, stderr); !ok {
		return code
	}
	pattern, err := patternArg(fs)
	if err != nil {
		return usageError(stderr, lsSynopsis, "%v", err)
	}
	opt, err := a.options()
	if err != nil {
		return usageError(stderr, lsSynopsis, "%v", err)
	}
	return adminRun(opt, a.prefix, stderr, func(ctx context.Context, s *session) int {
		locks, err := s.c.Locks(ctx, pattern)
		if err != nil {
			complain(stderr, "ls: %v", err)
			return exitFail
		}
		if asJSON {
			return printJSON(stdout, stderr, locks)
		}
		writeList(stdout, locks, a.prefix, pattern)
		return exitOK
	})
}

// patternArg returns the optional PATTERN argument of ls and top, checked.
func patternArg(fs *pflag.FlagSet) (string, error) {
	if fs.NArg() > 1 {
		return "", fmt.Errorf("want at most one PATTERN, got %q", fs.Args())
	}
	p := fs.Arg(0)
	if _, err := path.Match(p, ""); err != nil {
		return "", fmt.Errorf("PATTERN %q: %v", p, err)
	}
	return p, nil
}

// unlockCmd is "dlock unlock --force": it frees the lock NAME whoever
// holds it, through Client.ForceUnlock — the next waiters get it as from a
// release; a Semaphore gets every permit back; a Latch is opened; an
// Election's observers are told nobody leads — and prints what it freed. Holders learn of the loss at their next renewal.
// Without --kind it frees the one kind of lock under NAME that is held
// (or kept for a waiter), and refuses when there are several.
func unlockCmd(args []string, stdout, stderr io.Writer) int {
	var (
		a     adminFlags
		kind  kindFlag
		force bool
	)
	fs := newFlags("unlock")
	a.register(fs)
	fs.Var(&kind, "kind", "free the lock of `KIND`: "+kindNames+" (default: the one kind held under NAME)")
	fs.BoolVar(&force, "force", false, "required: free the lock whoever holds it (its holders find out at their next renewal)")
	if code, ok := parseFlags(fs, unlockSynopsis, args, stdout, stderr); !ok {
		return code
	}
	name, err := oneName(fs)
	if err != nil {
		return usageError(stderr, unlockSynopsis, "%v", err)
	}
	if !force {
		return usageError(stderr, unlockSynopsis, "unlock frees a lock whoever holds it: say --force")
	}
	opt, err := a.options()
	if err != nil {
		return usageError(stderr, unlockSynopsis, "%v", err)
	}
	return adminRun(opt, a.prefix, stderr, func(ctx context.Context, s *session) int {
		locks, err := inspectLocks(ctx, s, name, kind.kinds())
		if err != nil {
			complain(stderr, "unlock %q: %v", name, err)
			return exitFail
		}
		if kind.kind == "" {
			locks = slices.DeleteFunc(locks, func(l *dlock.LockInfo) bool { return !l.Held && l.KeptFor == "" })
			switch len(locks) {
			case 0:
				fmt.Fprintf(stdout, "no lock called %q is held under prefix %q: nothing freed\n", name, a.prefix)
				return exitNothing
			case 1:
			default:
				var ks []string
				for _, l := range locks {
					ks = append(ks, string(l.Kind))
				}
				return usageError(stderr, unlockSynopsis, "%d kinds of lock called %q are held (%s): say which with --kind",
					len(locks), name, strings.Join(ks, ", "))
			}
		}
		before, err := s.c.ForceUnlock(ctx, locks[0].Kind, name)
		if err != nil {
			complain(stderr, "unlock %q: %v", name, err)
			return exitFail
		}
		writeFreed(stdout, before, time.Now())
		return exitOK
	})
}
