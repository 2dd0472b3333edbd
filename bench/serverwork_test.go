package bench

import (
	"context"
	"crypto/sha1"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/redis/go-redis/v9"
)

// BenchmarkServerWork measures what an uncontended Lock+Unlock costs the
// redis-server when nothing else differs: g goroutines, each with its own
// go-redis client of one connection and its own key, each call sent
// alone. server-us/op is the server's CPU (INFO cpu) per pair. The cases:
//
//   - dlock-scripts: dlock's own fast scripts (lock_fast.lua and
//     unlock_fast.lua as the Client loads them), with the keys and
//     arguments a Mutex's Lock and Unlock send, called directly: the
//     server's side of dlock's pair without dlock's client;
//   - one-string: a sketch, not a lock dlock has: the same checks (a
//     buried token, a waiter) and the same fence, but the hold kept as
//     one string "<token> <fence>" set by SET NX PX, without the time
//     stamp: what the Redis-side protocol change named in issue 35's
//     notes would leave the server to do;
//   - redislock: bsm/redislock's Obtain and Release (two scripts too).
//
// Run it alternating (./alternate.sh 5 'ServerWork/'), since this VM's
// timings move from round to round.
func BenchmarkServerWork(b *testing.B) {
	for _, g := range []int{1, 16} {
		for _, c := range serverWorkCases() {
			b.Run(fmt.Sprintf("g%d/%s", g, c.name), func(b *testing.B) { serverWork(b, g, c) })
		}
	}
}

// A serverWorkCase is one way to take and free a lock of one's own: pair
// does it once, on c, for the lock named name, as owner tok.
type serverWorkCase struct {
	name  string
	setup func(b *testing.B, c *redis.Client) // scripts loaded
	pair  func(ctx context.Context, c *redis.Client, name, tok string) error
}

// The one-string sketch's scripts (see BenchmarkServerWork): the keys and
// arguments are dlock's fast scripts' own, so only the work differs.
const (
	oneStringLockSrc = `
if redis.call('EXISTS', KEYS[3]) == 1 and redis.call('ZSCORE', KEYS[3], ARGV[1]) then
  return -5
end
local f = redis.call('INCR', KEYS[2])
if redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. f, 'NX', 'PX', ARGV[2]) then
  return {1, f}
end
return -5`
	oneStringUnlockSrc = `
if redis.call('EXISTS', KEYS[3]) == 1 then
  return -5
end
if redis.call('GET', KEYS[1]) == ARGV[1] .. ' ' .. ARGV[2] then
  redis.call('DEL', KEYS[1])
  return 1
end
return -1`
)

var oneStringLock, oneStringUnlock = redis.NewScript(oneStringLockSrc), redis.NewScript(oneStringUnlockSrc)

// functionsSrc is a sketch for instructions.sh, not a lock dlock has:
// dlock's two fast scripts, word for word in what they do and with the
// same keys and arguments, as a library of Redis 7 functions (FUNCTION
// LOAD, FCALL), which the server compiles once and calls without running
// a script's text (its constants, its helpers' definitions) at each
// call: what the server's work per pair would be if dlock called
// functions rather than scripts.
const functionsSrc = `#!lua name=dlocksketch
local function lock(keys, args)
  if redis.call('EXISTS', keys[1], keys[3]) ~= 0 then
    if redis.call('ZSCORE', keys[3], args[1]) then
      return -5
    end
    if redis.call('EXISTS', keys[1]) ~= 0 then
      return -5
    end
  end
  local f = redis.call('INCR', keys[2])
  if f >= 100000000000000 then
    f = redis.call('GET', keys[2])
  end
  redis.call('SET', keys[1], args[1] .. ' ' .. f .. ' ' .. args[3] .. ' 1 0 0 ', 'PX', args[2])
  return {1, f}
end
local function unlock(keys, args)
  if redis.call('EXISTS', keys[3]) == 1 then
    return -5
  end
  local token = args[1]
  local v = redis.call('GET', keys[1])
  if not v or string.sub(v, 1, #token + 1) ~= token .. ' ' then
    if redis.call('GET', keys[2]) == args[2] or redis.call('ZSCORE', keys[4], 'rel:' .. token) then
      return 1
    end
    return -1
  end
  redis.call('DEL', keys[1])
  return 1
end
redis.register_function('dlocksketch_lock', lock)
redis.register_function('dlocksketch_unlock', unlock)`

func serverWorkCases() []serverWorkCase {
	// fenceOf reads a {1, fence} reply.
	fenceOf := func(r any, err error) (int64, error) {
		if err != nil {
			return 0, err
		}
		a, ok := r.([]any)
		if !ok || len(a) != 2 || a[0] != int64(1) {
			return 0, fmt.Errorf("not taken: %v", r)
		}
		f, _ := a[1].(int64)
		return f, nil
	}
	freed := func(r any, err error) error {
		if err != nil {
			return err
		}
		if r != int64(1) {
			return fmt.Errorf("not freed: %v", r)
		}
		return nil
	}
	load := func(srcs ...string) func(*testing.B, *redis.Client) {
		return func(b *testing.B, c *redis.Client) {
			for _, s := range srcs {
				if err := c.ScriptLoad(context.Background(), s).Err(); err != nil {
					fatalf(b, "SCRIPT LOAD: %v", err)
				}
			}
		}
	}
	return []serverWorkCase{
		{"dlock-scripts", load(protocol.LockFastScript.Src, protocol.UnlockFastScript.Src),
			func(ctx context.Context, c *redis.Client, name, tok string) error {
				k := protocol.NewKeys("dlock", protocol.MutexKind, name)
				lock := protocol.LockFastArgs{Token: tok, TTL: 30_000}.Call(k).Command(false)
				f, err := fenceOf(c.Do(ctx, lock.Args...).Result())
				if err != nil {
					return err
				}
				unlock := protocol.UnlockFastArgs{Token: tok, Fence: f}.Call(k).Command(false)
				return freed(c.Do(ctx, unlock.Args...).Result())
			}},
		{"one-string", load(oneStringLockSrc, oneStringUnlockSrc),
			func(ctx context.Context, c *redis.Client, name, tok string) error {
				k := protocol.NewKeys("dlock", protocol.MutexKind, name)
				f, err := fenceOf(oneStringLock.EvalSha(ctx, c, []string{k.Lock, k.Fence, k.Dead}, tok, 30_000).Result())
				if err != nil {
					return err
				}
				return freed(oneStringUnlock.EvalSha(ctx, c, []string{k.Lock, k.Fence, k.Queue, k.Dead}, tok, f).Result())
			}},
		{"redislock", func(*testing.B, *redis.Client) {},
			func(ctx context.Context, c *redis.Client, name, tok string) error {
				l, err := redislock.New(c).Obtain(ctx, name, 30*time.Second, nil)
				if err != nil {
					return err
				}
				return l.Release(ctx)
			}},
	}
}

// serverWork runs c's pairs on g goroutines until b.N pairs are done.
func serverWork(b *testing.B, g int, c serverWorkCase) {
	addr := serverAddr(b)
	admin := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
	defer admin.Close()
	c.setup(b, admin)
	clients := make([]*redis.Client, g)
	for i := range clients {
		clients[i] = redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
		defer clients[i].Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	label := newKey("serverwork-" + c.name)
	// each goroutine's own name, and a token per pair
	run := func(n int64) error {
		var left atomic.Int64
		left.Store(n)
		var wg sync.WaitGroup
		errc := make(chan error, g)
		for i := range g {
			wg.Go(func() {
				name := label + ":" + strconv.Itoa(i)
				for j := 0; left.Add(-1) >= 0; j++ {
					if err := c.pair(ctx, clients[i], name, name+":"+strconv.Itoa(j)); err != nil {
						errc <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errc)
		return errors.Join(<-errc)
	}
	if err := run(int64(10 * g)); err != nil { // connections made, scripts cached
		fatalf(b, "%s: warm-up: %v", c.name, err)
	}
	cpu0 := serverCPU(b, admin)
	b.ResetTimer()
	start := time.Now()
	err := run(int64(b.N))
	took := time.Since(start)
	b.StopTimer()
	if err != nil {
		fatalf(b, "%s: %v", c.name, err)
	}
	cpu := serverCPU(b, admin) - cpu0
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "server-us/op")
	b.ReportMetric(float64(b.N)/took.Seconds(), "ops/s")
}

var (
	serverWorkFeed      = flag.String("serverwork.feed", "", "TestServerWorkFeed: write, in this directory, the RESP of N uncontended pairs of each BenchmarkServerWork case (for instructions.sh)")
	serverWorkRedislock = flag.String("serverwork.redislock", "", "TestServerWorkFeed: redislock.go of bsm/redislock, whose scripts the redislock case sends")
)

// TestServerWorkFeed writes what instructions.sh feeds a redis-server run
// under callgrind: for each BenchmarkServerWork case and N of 2 000 and
// 4 000, <case>-<N>.resp, the case's scripts loaded and then N Lock+Unlock
// pairs on 64 names, each call as its case sends it (dlock's fast scripts
// with a Mutex's keys and arguments; the one-string sketch; redislock's
// own two scripts, read from its source, with its Obtain's arguments).
// The difference of the two runs' instructions ÷ 2 000 is one pair's,
// the server's start-up and loading cancelled out.
func TestServerWorkFeed(t *testing.T) {
	if *serverWorkFeed == "" {
		t.Skip("run with -serverwork.feed DIR (instructions.sh does)")
	}
	src, err := os.ReadFile(*serverWorkRedislock)
	if err != nil {
		t.Fatalf("-serverwork.redislock: %v", err)
	}
	script := func(name string) string {
		m := regexp.MustCompile(name + `\s*=\s*redis\.NewScript\(` + "`([^`]*)`").FindSubmatch(src)
		if m == nil {
			t.Fatalf("%s: no %s script", *serverWorkRedislock, name)
		}
		return string(m[1])
	}
	obtain, release := script("luaObtain"), script("luaRelease")
	sha := func(s string) string { return fmt.Sprintf("%x", sha1.Sum([]byte(s))) }
	for _, n := range []int{2000, 4000} {
		for _, c := range []string{"dlock-scripts", "one-string", "redislock", "functions"} {
			var b []byte
			add := func(args ...any) { b = appendRESP(b, args...) }
			switch c {
			case "dlock-scripts":
				add("SCRIPT", "LOAD", protocol.LockFastScript.Src)
				add("SCRIPT", "LOAD", protocol.UnlockFastScript.Src)
			case "one-string":
				add("SCRIPT", "LOAD", oneStringLockSrc)
				add("SCRIPT", "LOAD", oneStringUnlockSrc)
			case "redislock":
				add("SCRIPT", "LOAD", obtain)
				add("SCRIPT", "LOAD", release)
			case "functions":
				add("FUNCTION", "LOAD", "REPLACE", functionsSrc)
			}
			for i := range n {
				name := "serverwork:" + strconv.Itoa(i%64)
				tok := "tok-0123456789abcdef-" + strconv.Itoa(i)
				k := protocol.NewKeys("dlock", protocol.MutexKind, name)
				fence := i + 1 // one counter, taken once a pair, from 0
				switch c {
				case "dlock-scripts":
					add(protocol.LockFastArgs{Token: tok, TTL: 30_000}.Call(k).Command(false).Args...)
					add(protocol.UnlockFastArgs{Token: tok, Fence: int64(fence)}.Call(k).Command(false).Args...)
				case "one-string":
					add("EVALSHA", sha(oneStringLockSrc), 3, k.Lock, k.Fence, k.Dead, tok, 30_000)
					add("EVALSHA", sha(oneStringUnlockSrc), 4, k.Lock, k.Fence, k.Queue, k.Dead, tok, fence)
				case "redislock":
					add("EVALSHA", sha(obtain), 1, name, tok, len(tok), 30_000)
					add("EVALSHA", sha(release), 1, name, tok)
				case "functions":
					add("FCALL", "dlocksketch_lock", 3, k.Lock, k.Fence, k.Dead, tok, 30_000, 1_765_000_000_000+i)
					add("FCALL", "dlocksketch_unlock", 4, k.Lock, k.Fence, k.Queue, k.Dead, tok, fence)
				}
			}
			if err := os.WriteFile(filepath.Join(*serverWorkFeed, fmt.Sprintf("%s-%d.resp", c, n)), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// appendRESP appends a command to b as RESP, each word its fmt.Sprint.
func appendRESP(b []byte, args ...any) []byte {
	b = fmt.Appendf(b, "*%d\r\n", len(args))
	for _, a := range args {
		s := fmt.Sprint(a)
		b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(s), s)
	}
	return b
}
