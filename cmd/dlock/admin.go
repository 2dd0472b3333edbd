package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// Usage lines and limits of inspect and unlock.
const (
	inspectSynopsis = "dlock inspect [--redis URL] [--tls-*] [--prefix P] NAME"
	unlockSynopsis  = "dlock unlock [--redis URL] [--tls-*] [--prefix P] NAME"
	// adminTimeout bounds inspect and unlock, connection included.
	adminTimeout = 10 * time.Second
)

// adminArgs parses the command line shared by inspect and unlock. It
// returns the connection options and the lock's name and keys, or ok
// false and the exit status.
func adminArgs(cmd, synopsis string, args []string, stdout, stderr io.Writer) (opt *redis.Options, name string, k dlock.Keys, code int, ok bool) {
	var conn connFlags
	fs := newFlags(cmd)
	conn.register(fs)
	prefix := fs.String("prefix", dlock.DefaultPrefix, "key `prefix` of the lock")
	if code, ok := parseFlags(fs, synopsis, args, stdout, stderr); !ok {
		return nil, "", k, code, false
	}
	if fs.NArg() != 1 || fs.Arg(0) == "" {
		return nil, "", k, usageError(stderr, synopsis, "want exactly one lock NAME, got %q", fs.Args()), false
	}
	if err := checkPrefix(*prefix); err != nil {
		return nil, "", k, usageError(stderr, synopsis, "%v", err), false
	}
	opt, err := conn.options(os.Getenv)
	if err != nil {
		return nil, "", k, usageError(stderr, synopsis, "%v", err), false
	}
	name = fs.Arg(0)
	return opt, name, keysFor(*prefix, name), exitOK, true
}

// adminRun parses an admin command's arguments, connects to Redis with
// the admin timeout, and runs do.
func adminRun(cmd, synopsis string, args []string, stdout, stderr io.Writer,
	do func(ctx context.Context, rdb *redis.Client, name string, k dlock.Keys) int) int {
	opt, name, k, code, ok := adminArgs(cmd, synopsis, args, stdout, stderr)
	if !ok {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	rdb, err := dial(ctx, opt)
	if err != nil {
		complain(stderr, "%v", err)
		return exitFail
	}
	defer rdb.Close()
	return do(ctx, rdb, name, k)
}

// lockState is what Redis holds for one lock.
type lockState struct {
	kind   string           // the lock key's type: "none" when not held, "hash" when held
	owners map[string]int64 // owner token -> hold count
	pttl   time.Duration    // -1 ns: no expiry; -2 ns: no key
	fence  int64            // last fencing token issued; 0: none yet
}

// inspectCmd is "dlock inspect": it shows whether the lock NAME is held,
// by which owner tokens with which hold counts, its time to live, and its
// fencing counter. It reads the keys the library writes, in one MULTI.
func inspectCmd(args []string, stdout, stderr io.Writer) int {
	return adminRun("inspect", inspectSynopsis, args, stdout, stderr, func(ctx context.Context, rdb *redis.Client, name string, k dlock.Keys) int {
		return inspect(ctx, rdb, name, k, stdout, stderr)
	})
}

// inspect prints what Redis holds for the lock.
func inspect(ctx context.Context, rdb *redis.Client, name string, k dlock.Keys, stdout, stderr io.Writer) int {
	st, err := readLock(ctx, rdb, k)
	if err != nil {
		complain(stderr, "inspect %q: %v", name, err)
		return exitFail
	}

	fmt.Fprintf(stdout, "lock %q (key %s)\n", name, k.Lock)
	switch st.kind {
	case "none":
		fmt.Fprintln(stdout, "  held:   no")
	case "hash":
		fmt.Fprintf(stdout, "  held:   yes, by %d owner%s\n", len(st.owners), plural(len(st.owners)))
		for _, tok := range slices.Sorted(maps.Keys(st.owners)) {
			fmt.Fprintf(stdout, "  owner:  %s  hold count %d\n", tok, st.owners[tok])
		}
		fmt.Fprintf(stdout, "  ttl:    %s\n", formatPTTL(st.pttl))
	default:
		complain(stderr, "key %s is a %s, not a dlock lock (a hash)", k.Lock, st.kind)
		return exitFail
	}
	if st.fence == 0 {
		fmt.Fprintf(stdout, "  fence:  none issued yet (%s)\n", k.Fence)
	} else {
		fmt.Fprintf(stdout, "  fence:  %d, the last one issued (%s)\n", st.fence, k.Fence)
	}
	return exitOK
}

// readLock reads the lock's hash, its PTTL and its fencing counter as one
// atomic snapshot.
func readLock(ctx context.Context, rdb *redis.Client, k dlock.Keys) (lockState, error) {
	var (
		kind   *redis.StatusCmd
		owners *redis.MapStringStringCmd
		pttl   *redis.DurationCmd
		fence  *redis.StringCmd
	)
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		kind = p.Type(ctx, k.Lock)
		owners = p.HGetAll(ctx, k.Lock) // WRONGTYPE if it is no hash: kind says so
		pttl = p.PTTL(ctx, k.Lock)
		fence = p.Get(ctx, k.Fence)
		return nil
	})
	st := lockState{kind: kind.Val(), pttl: pttl.Val()}
	if kind.Err() != nil {
		return st, kind.Err()
	}
	if err != nil && !errors.Is(err, redis.Nil) && st.kind == "hash" {
		return st, err
	}
	if st.kind == "hash" {
		st.owners = make(map[string]int64)
		for tok, n := range owners.Val() {
			if isOwner(tok) {
				st.owners[tok], _ = strconv.ParseInt(n, 10, 64)
			}
		}
	}
	if err := fence.Err(); err != nil && !errors.Is(err, redis.Nil) {
		return st, fmt.Errorf("fence %s: %w", k.Fence, err)
	}
	if v := fence.Val(); v != "" {
		st.fence, _ = strconv.ParseInt(v, 10, 64)
	}
	return st, nil
}

// forceUnlock deletes a lock whatever its owner, atomically with reading
// what it deletes, and wakes the lock's waiters as a release would.
//
// KEYS[1]  lock hash: owner token -> hold count
// ARGV[1]  the lock's release channel
//
// Returns  {0}                    no such key: nothing deleted
//
//	{-1, type}             the key is no hash: nothing deleted
//	{1, pttl, owners...}   deleted; owners as HGETALL gives them
var forceUnlock = redis.NewScript(`
local t = redis.call('TYPE', KEYS[1])
t = t.ok or t
if t == 'none' then
  return {0}
end
if t ~= 'hash' then
  return {-1, t}
end
local reply = {1, redis.call('PTTL', KEYS[1])}
for _, v in ipairs(redis.call('HGETALL', KEYS[1])) do
  reply[#reply + 1] = v
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[1], 'all')
return reply
`)

// unlockCmd is "dlock unlock": it deletes the lock NAME whoever holds it,
// says what it deleted, and wakes the lock's waiters. The holder's lease
// ends at its next renewal. The fencing counter stays: fences never go
// back.
func unlockCmd(args []string, stdout, stderr io.Writer) int {
	return adminRun("unlock", unlockSynopsis, args, stdout, stderr, func(ctx context.Context, rdb *redis.Client, name string, k dlock.Keys) int {
		return forceDelete(ctx, rdb, name, k, stdout, stderr)
	})
}

// forceDelete deletes the lock and reports what it deleted.
func forceDelete(ctx context.Context, rdb *redis.Client, name string, k dlock.Keys, stdout, stderr io.Writer) int {
	res, err := forceUnlock.Run(ctx, rdb, []string{k.Lock}, k.Channel).Slice()
	if err != nil {
		complain(stderr, "unlock %q: %v", name, err)
		return exitFail
	}
	switch status, _ := res[0].(int64); status {
	case 0:
		fmt.Fprintf(stdout, "lock %q is not held (no key %s): nothing deleted\n", name, k.Lock)
		return exitOK
	case -1:
		complain(stderr, "key %s is a %v, not a dlock lock (a hash): nothing deleted", k.Lock, res[1])
		return exitFail
	}
	pttl, _ := res[1].(int64)
	fmt.Fprintf(stdout, "deleted lock %q (key %s), which had %s left\n", name, k.Lock,
		formatPTTL(time.Duration(pttl)*time.Millisecond))
	for i := 2; i+1 < len(res); i += 2 {
		if tok, _ := res[i].(string); isOwner(tok) {
			fmt.Fprintf(stdout, "  owner:  %v  hold count %v: loses its lease at its next renewal\n", res[i], res[i+1])
		}
	}
	fmt.Fprintf(stdout, "waiters were woken; the fence counter %s is kept (fences never go back)\n", k.Fence)
	return exitOK
}

// formatPTTL formats a PTTL reply: a duration, or what -1 and -2 mean.
func formatPTTL(d time.Duration) string {
	switch {
	case d == -1 || d == -time.Millisecond: // go-redis's PTTL, the script's
		return "no expiry (not set by dlock)"
	case d < 0:
		return "gone"
	}
	return d.Round(time.Millisecond).String()
}

// plural returns "s" unless n is 1.
func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// isOwner tells an owner token among a mutex hash's fields from the
// others: "t:<token>" (when it was taken) and "@next" (a waiter it is kept
// for).
func isOwner(field string) bool {
	return !strings.HasPrefix(field, "t:") && !strings.HasPrefix(field, "@")
}
