package dlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Inspection: who holds what, who waits, for operators and the tools
// they use (cmd/dlock's inspect, ls, top and unlock --force). Reading is a
// snapshot: one pipeline per lock, all its keys in one slot.

// Kind is a family of locks as Redis keeps them: Mutex and FairMutex are
// one kind (one lock, one queue).
type Kind string

const (
	KindMutex     Kind = "mutex"
	KindRWMutex   Kind = "rwmutex"
	KindSemaphore Kind = "semaphore"
	KindLatch     Kind = "latch"
)

// kinds maps a Kind to its key layout.
var kinds = map[Kind]kind{KindMutex: kindMutex, KindRWMutex: kindRW, KindSemaphore: kindSemaphore, KindLatch: kindLatch}

// LockInfo is what Redis says of one lock at one moment.
type LockInfo struct {
	Kind Kind
	Name string
	Key  string        // the lock's own key
	Held bool          // some holder has it (for a Latch: the latch is closed)
	TTL  time.Duration // the key's time to live: 0 if it does not exist, -1 if it has no expiry
	// Fence is the last fencing token issued for the lock (0: none yet).
	Fence int64
	// Mode is an RWMutex's: "read", "write", or "" when free.
	Mode    string
	Holders []Holder
	// Waiters are in the order they will be served (an RWMutex's readers
	// admitted by the last writer's release, then its writers in order,
	// then its other readers).
	Waiters []Waiter
	// KeptFor is the member of the waiter a free Mutex is kept for ("" if
	// none).
	KeptFor string
	// Capacity and Free are a Semaphore's permits.
	Capacity, Free int64
	// Count is a Latch's count (0 when open).
	Count int64
}

// Holder is one owner of a lock.
type Holder struct {
	Token string
	Side  string // an RWMutex's: "read" or "write"
	// Holds is the hold count (1 + re-entries), or a Semaphore holder's
	// permits.
	Holds int64
	Fence int64         // the holder's fencing token (a Mutex's is LockInfo.Fence)
	Since time.Time     // when it took the lock, by the server's clock (zero if unknown)
	TTL   time.Duration // how long its hold has left, as the server sees it
	Owner *Owner        // who it is, if its Client said (nil otherwise)
}

// Waiter is one registered waiter.
type Waiter struct {
	Token   string
	Side    string        // an RWMutex's: "read" or "write"
	Permits int64         // a Semaphore waiter's
	Since   time.Time     // when it arrived, by the server's clock (zero for readers)
	Expires time.Duration // how long its place lives unless it renews it
	Owner   *Owner
}

// Owner is who a Client is, as it recorded itself (WithOwnerLabel).
type Owner struct {
	Client  string // the Client's id: the first 16 hex digits of its tokens
	Host    string
	PID     int
	Program string
	Label   string
	Started time.Time
}

// ownerTTL is how long a Client's record lives; it is written again at
// the first acquire after half of it has passed, and deleted by Close.
const ownerTTL = 24 * time.Hour

// WithOwnerLabel sets the free label a Client records about itself for
// inspectors, next to its host name, pid, program and start time (on by
// default; never put a secret in it).
func WithOwnerLabel(label string) Option {
	return func(c *clientConfig) { c.label = label }
}

// WithoutOwnerInfo stops a Client from recording who it is: inspectors then
// show its holds by token only.
func WithoutOwnerInfo() Option {
	return func(c *clientConfig) { c.noOwner = true }
}

// owners is a Client's record of itself.
type owners struct {
	off     bool
	fields  []any
	mu      sync.Mutex
	written time.Time
}

func newOwners(cfg clientConfig) *owners {
	if cfg.noOwner {
		return &owners{off: true}
	}
	host, _ := os.Hostname()
	prog := filepath.Base(os.Args[0])
	return &owners{fields: []any{"host", host, "pid", os.Getpid(), "program", prog,
		"label", cfg.label, "started", time.Now().UnixMilli()}}
}

// ownerKey names a Client's record.
func ownerKey(prefix, id string) string { return prefix + ":client:" + id }

// announce records who the Client is when it takes a hold or waits and
// its record is missing or half its life old. It costs one call, rarely,
// within the caller's ctx (a short ctx is not stretched for it: a record
// that could not be written is tried again next time).
func (c *Client) announce(ctx context.Context) {
	o := c.owner
	if o.off {
		return
	}
	o.mu.Lock()
	due := time.Since(o.written) > ownerTTL/2
	if due {
		o.written = time.Now()
	}
	o.mu.Unlock()
	if !due {
		return
	}
	args := append([]any{ownerTTL.Milliseconds()}, o.fields...)
	if c.be.everywhere(ctx, call{ownerScript, []string{ownerKey(c.prefix, c.id)}, args}) != nil {
		o.mu.Lock()
		o.written = time.Time{}
		o.mu.Unlock()
	}
}

// forget deletes the Client's record (Close).
func (c *Client) forget() {
	if c.owner.off {
		return
	}
	ctx, cancel := bounded(context.Background())
	defer cancel()
	_ = c.be.everywhere(ctx, call{ownerScript, []string{ownerKey(c.prefix, c.id)}, []any{0}})
}

// reader is the Redis that inspection reads: the Client's, or a quorum's
// first node.
func (c *Client) reader() (Redis, error) {
	if c.rdb != nil {
		return c.rdb, nil
	}
	return nil, errNotOnQuorum("inspection")
}

// Inspect reads one lock: its holders (with who they are, when their
// Clients recorded it), its waiters in order, its TTL and fence, and the
// state of its kind (mode, permits, count). A lock that does not exist is
// returned with Held false and nothing in it.
func (c *Client) Inspect(ctx context.Context, kd Kind, name string) (*LockInfo, error) {
	if err := checkCall(ctx, c, name); err != nil {
		return nil, err
	}
	r, err := c.reader()
	if err != nil {
		return nil, err
	}
	lk, ok := kinds[kd]
	if !ok {
		return nil, invalid("lock kind %q: want mutex, rwmutex, semaphore or latch", kd)
	}
	k := c.keys(lk, name)
	info := &LockInfo{Kind: kd, Name: name, Key: k.lock}
	var (
		typ                           *redis.StatusCmd
		pttl                          *redis.DurationCmd
		fence, permits, str           *redis.StringCmd
		queue, alive, readers, rqueue *redis.ZSliceCmd
		rphase                        *redis.ZSliceCmd
		leases                        *redis.ZSliceCmd
		now                           *redis.TimeCmd
	)
	_, err = r.Pipelined(ctx, func(p redis.Pipeliner) error {
		now = p.Time(ctx)
		typ = p.Type(ctx, k.lock)
		pttl = p.PTTL(ctx, k.lock)
		fence = p.Get(ctx, k.fence)
		switch kd {
		case KindLatch:
			str = p.Get(ctx, k.lock)
			return nil
		case KindSemaphore:
			permits = p.Get(ctx, k.permits)
			leases = p.ZRangeWithScores(ctx, k.leases, 0, -1)
		case KindRWMutex:
			readers = p.ZRangeWithScores(ctx, k.readers, 0, -1)
			rqueue = p.ZRangeWithScores(ctx, k.rqueue, 0, -1)
			rphase = p.ZRangeWithScores(ctx, k.rphase, 0, -1)
		}
		queue = p.ZRangeWithScores(ctx, k.queue, 0, -1)
		alive = p.ZRangeWithScores(ctx, k.alive, 0, -1)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, redisErr("inspect", name, err)
	}
	srv := now.Val()
	info.TTL = ttlOf(pttl.Val())
	info.Fence, _ = strconv.ParseInt(fence.Val(), 10, 64)
	if kd == KindLatch {
		info.Count, _ = strconv.ParseInt(str.Val(), 10, 64)
		info.Held = info.Count > 0
		return info, nil
	}
	if typ.Val() == "string" { // a script-free mutex: the value is the owner's token
		tok, err := r.Do(ctx, "GET", k.lock).Text()
		if err == nil {
			info.Held = true
			info.Holders = []Holder{{Token: tok, Holds: 1, Fence: info.Fence, TTL: info.TTL}}
		}
		return info, c.fillOwners(ctx, r, info)
	}
	fields := map[string]string{}
	if typ.Val() == "hash" {
		var h *redis.MapStringStringCmd
		if _, err := r.Pipelined(ctx, func(p redis.Pipeliner) error { h = p.HGetAll(ctx, k.lock); return nil }); err != nil {
			return nil, redisErr("inspect", name, err)
		}
		fields = h.Val()
	}
	msAt := func(v string) time.Time {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms <= 0 {
			return time.Time{}
		}
		return time.UnixMilli(ms)
	}
	expiry := func(score float64) time.Duration { return time.UnixMilli(int64(score)).Sub(srv) }
	switch kd {
	case KindMutex:
		for f, v := range fields {
			switch {
			case f == "@next":
				info.KeptFor = v
			case strings.HasPrefix(f, "t:"):
			default:
				n, _ := strconv.ParseInt(v, 10, 64)
				info.Holders = append(info.Holders, Holder{Token: f, Holds: n, Fence: info.Fence,
					Since: msAt(fields["t:"+f]), TTL: info.TTL})
			}
		}
	case KindRWMutex:
		info.Mode = fields["mode"]
		until := map[string]time.Duration{}
		for _, z := range readers.Val() {
			until[z.Member.(string)] = expiry(z.Score)
		}
		for f, v := range fields {
			side, tok, ok := strings.Cut(f, ":")
			if !ok || (side != "r" && side != "w") {
				continue
			}
			n, _ := strconv.ParseInt(v, 10, 64)
			h := Holder{Token: tok, Side: map[string]string{"r": "read", "w": "write"}[side], Holds: n,
				Since: msAt(fields["t:"+tok]), TTL: info.TTL}
			h.Fence, _ = strconv.ParseInt(fields["f:"+tok], 10, 64)
			if side == "r" {
				h.TTL = until[tok]
			}
			info.Holders = append(info.Holders, h)
		}
	case KindSemaphore:
		info.Capacity, _ = strconv.ParseInt(permits.Val(), 10, 64)
		until := map[string]time.Duration{}
		for _, z := range leases.Val() {
			until[z.Member.(string)] = expiry(z.Score)
		}
		used := int64(0)
		for f, v := range fields {
			tok, ok := strings.CutPrefix(f, "p:")
			if !ok {
				continue
			}
			n, _ := strconv.ParseInt(v, 10, 64)
			used += n
			h := Holder{Token: tok, Holds: n, Since: msAt(fields["t:"+tok]), TTL: until[tok]}
			h.Fence, _ = strconv.ParseInt(fields["f:"+tok], 10, 64)
			info.Holders = append(info.Holders, h)
		}
		info.Free = info.Capacity - used
	}
	info.Held = len(info.Holders) > 0
	slices.SortFunc(info.Holders, func(a, b Holder) int {
		return cmp.Or(a.Since.Compare(b.Since), strings.Compare(a.Token, b.Token))
	})

	// Waiters: an RWMutex's admitted readers (a read phase: they go
	// first), then the queue in arrival order, each with its place's
	// expiry.
	readersIn := func(zs []redis.Z) {
		for _, z := range zs {
			w := Waiter{Token: tokenOf(z.Member.(string))}
			w.Side, w.Expires = "read", expiry(z.Score)
			info.Waiters = append(info.Waiters, w)
		}
	}
	if kd == KindRWMutex {
		readersIn(rphase.Val())
	}
	places := map[string]float64{}
	for _, z := range alive.Val() {
		places[z.Member.(string)] = z.Score
	}
	for _, z := range queue.Val() {
		m := z.Member.(string)
		w := Waiter{Token: tokenOf(m)}
		w.Since = time.UnixMicro(int64(z.Score))
		w.Expires = expiry(places[m])
		if kd == KindRWMutex {
			w.Side = "write"
		}
		if kd == KindSemaphore {
			w.Permits = extraInt(m)
		}
		info.Waiters = append(info.Waiters, w)
	}
	if kd == KindRWMutex {
		readersIn(rqueue.Val())
	}
	return info, c.fillOwners(ctx, r, info)
}

// extraInt is the number at the end of a semaphore waiter's member.
func extraInt(member string) int64 {
	n, _ := strconv.ParseInt(member[strings.LastIndexByte(member, ':')+1:], 10, 64)
	return n
}

// ttlOf turns a PTTL reply into LockInfo.TTL.
func ttlOf(d time.Duration) time.Duration {
	switch {
	case d == -2*time.Nanosecond || d == -2*time.Millisecond:
		return 0
	case d < 0:
		return -1
	}
	return d
}

// fillOwners looks up who the holders and waiters are: their tokens start
// with their Client's id.
func (c *Client) fillOwners(ctx context.Context, r Redis, info *LockInfo) error {
	ids := map[string]*Owner{}
	for _, h := range info.Holders {
		if len(h.Token) >= 16 {
			ids[h.Token[:16]] = nil
		}
	}
	for _, w := range info.Waiters {
		if len(w.Token) >= 16 {
			ids[w.Token[:16]] = nil
		}
	}
	if len(ids) == 0 {
		return nil
	}
	cmds := map[string]*redis.MapStringStringCmd{}
	_, err := r.Pipelined(ctx, func(p redis.Pipeliner) error {
		for id := range ids {
			cmds[id] = p.HGetAll(ctx, ownerKey(c.prefix, id))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return redisErr("inspect", info.Name, err)
	}
	for id, cmd := range cmds {
		f := cmd.Val()
		if len(f) == 0 {
			continue
		}
		o := &Owner{Client: id, Host: f["host"], Program: f["program"], Label: f["label"]}
		o.PID, _ = strconv.Atoi(f["pid"])
		if ms, err := strconv.ParseInt(f["started"], 10, 64); err == nil {
			o.Started = time.UnixMilli(ms)
		}
		ids[id] = o
	}
	of := func(tok string) *Owner {
		if len(tok) < 16 {
			return nil
		}
		return ids[tok[:16]]
	}
	for i := range info.Holders {
		info.Holders[i].Owner = of(info.Holders[i].Token)
	}
	for i := range info.Waiters {
		info.Waiters[i].Owner = of(info.Waiters[i].Token)
	}
	return nil
}

// Locks lists the locks under the Client's prefix whose name matches
// pattern (path.Match syntax; "" for all), of every kind, each inspected.
// It walks the keyspace with SCAN — on a cluster, on every master — never
// KEYS. Locks that only ever existed (a fence counter, a semaphore's
// capacity) are listed too, free.
func (c *Client) Locks(ctx context.Context, pattern string) ([]*LockInfo, error) {
	if err := checkCall(ctx, c, "*"); err != nil {
		return nil, err
	}
	if pattern != "" {
		if _, err := path.Match(pattern, ""); err != nil {
			return nil, invalid("pattern %q: %v", pattern, err)
		}
	}
	r, err := c.reader()
	if err != nil {
		return nil, err
	}
	type id struct {
		kd   Kind
		name string
	}
	var mu sync.Mutex
	found := map[id]bool{}
	scan := func(ctx context.Context, r redis.Cmdable) error {
		iter := r.Scan(ctx, 0, c.prefix+":{*", 1000).Iterator()
		for iter.Next(ctx) {
			kd, name, ok := parseKey(c.prefix, iter.Val())
			if ok && (pattern == "" || matches(pattern, name)) {
				mu.Lock()
				found[id{kd, name}] = true
				mu.Unlock()
			}
		}
		return iter.Err()
	}
	// Within ctx (see within): found is not read when ctx ends first.
	scanned, late := within(ctx, func() error {
		switch r := raw(r).(type) {
		case *redis.ClusterClient:
			return r.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return scan(ctx, node) })
		case redis.Cmdable:
			return scan(ctx, r)
		}
		return fmt.Errorf("dlock: Locks needs a go-redis client (SCAN)")
	})
	if err = cmp.Or(late, scanned); err != nil {
		return nil, redisErr("scan", pattern, err)
	}
	var out []*LockInfo
	for l := range found {
		info, err := c.Inspect(ctx, l.kd, l.name)
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b *LockInfo) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(string(a.Kind), string(b.Kind)))
	})
	return out, nil
}

func matches(pattern, name string) bool {
	ok, _ := path.Match(pattern, name)
	return ok
}

// tagUnescaper undoes escapeTag.
var tagUnescaper = strings.NewReplacer("%7B", "{", "%7D", "}", "%25", "%")

// parseKey tells the kind and name of a lock from one of its keys
// (<prefix>:{<escaped name>}[:<kind>][:<part>]); ok is false for keys that
// are not a lock's.
func parseKey(prefix, key string) (Kind, string, bool) {
	rest, ok := strings.CutPrefix(key, prefix+":{")
	if !ok {
		return "", "", false
	}
	i := strings.IndexByte(rest, '}')
	if i < 0 {
		return "", "", false
	}
	name, suffix := tagUnescaper.Replace(rest[:i]), rest[i+1:]
	first, _, _ := strings.Cut(strings.TrimPrefix(suffix, ":"), ":")
	switch first {
	case "", "fence", "queue", "alive":
		return KindMutex, name, true
	case string(kindRW):
		return KindRWMutex, name, true
	case string(kindSemaphore):
		return KindSemaphore, name, true
	case string(kindLatch):
		return KindLatch, name, true
	}
	return "", "", false
}

// ForceUnlock frees a lock whoever holds it — an operator's last resort
// for a lock pinned by a holder that cannot be reached — and hands it to
// its next waiters as a release would. For a Semaphore every permit comes
// back; a Latch is opened. Holders learn of the loss at their next
// renewal (their work may still be running: fences are what protects the
// resources). It returns what the lock was just before.
func (c *Client) ForceUnlock(ctx context.Context, kd Kind, name string) (*LockInfo, error) {
	before, err := c.Inspect(ctx, kd, name)
	if err != nil {
		return nil, err
	}
	if err := c.be.supports(map[Kind]string{KindMutex: "Mutex", KindRWMutex: "RWMutex",
		KindSemaphore: "Semaphore", KindLatch: "Latch"}[kd]); err != nil {
		return nil, err
	}
	r, _ := c.reader()
	k := c.keys(kinds[kd], name)
	w := c.wakeTo(k)
	var cmd *redis.Cmd
	switch kd {
	case KindMutex:
		if !c.directed { // script-free: a plain key
			cmd = r.Do(ctx, "DEL", k.lock)
			break
		}
		cmd = forceScript.run(ctx, r, []string{k.lock, k.fence, k.queue, k.alive}, w.base, w.publish)
	case KindRWMutex:
		cmd = rwForceScript.run(ctx, r, []string{k.lock, k.readers, k.queue, k.alive, k.rqueue, k.rphase}, w.base, w.publish)
	case KindSemaphore:
		cmd = semForceScript.run(ctx, r, []string{k.lock, k.leases, k.permits, k.queue, k.alive}, w.base, w.publish)
	case KindLatch:
		cmd = latchOpenScript.run(ctx, r, []string{k.lock, k.ids}, k.channel, c.publish)
	}
	if err := cmd.Err(); err != nil {
		return nil, redisErr("unlock --force", name, err)
	}
	return before, nil
}
