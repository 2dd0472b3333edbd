package dlock

import (
	"cmp"
	"context"
	"errors"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/backend"
	"github.com/dlock-go/dlock/internal/deploy"
	"github.com/dlock-go/dlock/internal/protocol"

	"github.com/dlock-go/dlock/driver"
)

// Inspection: who holds what, who waits, for operators and the tools
// they use (cmd/dlock's inspect, ls, top and unlock --force). Reading is a
// snapshot: one pipeline per lock, all its keys in one slot.

// Kind is a family of locks as Redis keeps them: Mutex and FairMutex are
// one kind (one lock, one queue).
type Kind string

// The kinds, as Inspect and Locks report them.
const (
	KindMutex     Kind = "mutex"     // Mutex and FairMutex
	KindRWMutex   Kind = "rwmutex"   // RWMutex
	KindSemaphore Kind = "semaphore" // Semaphore
	KindLatch     Kind = "latch"     // Latch
	KindElection  Kind = "election"  // Election
)

// kindSpec is what Inspect, Locks and ForceUnlock know of one kind of
// lock; each primitive states its own beside its protocol (mutex.go,
// election.go, rwmutex.go, semaphore.go, latch.go).
type kindSpec struct {
	primitive string         // for backend.Caps.Supports
	keys      *protocol.Kind // its key layout
	queue     bool           // waiters queue in lib_queue.lua's queue and places
	plain     bool           // a script-free Client keeps it as a string: the owner's token
	// reads are what it reads beside what every kind does (the lock's
	// TYPE and PTTL, the queue); their replies are
	// inspection.extra, in order.
	reads func(k *protocol.Keys) []driver.Command
	// fill reads the holders and the state of the kind from in; the
	// common part (holders sorted, Held) follows. It returns false when
	// nothing more is to be read (a latch has no holders or waiters).
	fill func(in *inspection) bool
	// waiters appends the waiters, first to go first (default: the
	// queue in arrival order).
	waiters func(in *inspection)
	// force frees the lock as a release would (ForceUnlock); rc is the
	// receipt a copy of it answers with (see forceReceipt).
	force func(ctx context.Context, c *Client, r driver.Driver, k *protocol.Keys, rc forceReceipt) driver.Reply
}

// kindSpecs is the table of kinds, one per protocol.Kinds (TestKindsListedOnce).
var kindSpecs = specsOf(&mutexKind, &electionKind, &rwKind, &semKind, &latchKind)

// specsOf indexes the kinds' specs by their public name.
func specsOf(specs ...*kindSpec) map[Kind]*kindSpec {
	m := make(map[Kind]*kindSpec, len(specs))
	for _, sp := range specs {
		m[Kind(sp.keys.Name)] = sp
	}
	return m
}

// specOf returns kd's entry, or an error for an unknown kind.
func specOf(kd Kind) (*kindSpec, error) {
	if sp, ok := kindSpecs[kd]; ok {
		return sp, nil
	}
	names := make([]string, len(protocol.Kinds))
	for i, k := range protocol.Kinds {
		names[i] = k.Name
	}
	return nil, invalid("lock kind %q: want one of %s", kd, strings.Join(names, ", "))
}

// inspection is one Inspect's replies, as a kind's fill reads them.
type inspection struct {
	info   *LockInfo
	srv    time.Time         // the server's time
	fields map[string]string // the lock's hash (empty for other types)
	extra  []driver.Reply    // the replies of the kind's reads
	queue  []zmember         // waiters in arrival order (arrival numbers: server µs, see Waiter.Since)
	alive  []zmember         // their places' expiries (server ms)
}

// msAt reads a time stored in server ms (zero if unset).
func (in *inspection) msAt(v string) time.Time {
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// expiry is how long until a server ms score, from the server's now.
func (in *inspection) expiry(score float64) time.Duration {
	return time.UnixMilli(int64(score)).Sub(in.srv)
}

// text is extra reply i as text ("" if none).
func (in *inspection) text(i int) string { v, _ := in.extra[i].Text(); return v }

// queued appends the queue's waiters in arrival order, with side, and
// for a semaphore the permits each waits for.
func (in *inspection) queued(side string, permits bool) {
	places := map[string]float64{}
	for _, z := range in.alive {
		places[z.member] = z.score
	}
	for _, z := range in.queue {
		w := Waiter{Token: protocol.TokenOf(z.member), Side: side, Since: time.UnixMicro(int64(z.score)), Expires: in.expiry(places[z.member])}
		if permits {
			w.Permits = extraInt(z.member)
		}
		in.info.Waiters = append(in.info.Waiters, w)
	}
}

// untilOf maps each member of a sorted set of server-ms expiries (an
// RWMutex's readers, a Semaphore's permits) to how long it has left,
// leaving out those whose expiry has passed: the scripts drop such a
// holder (score <= now, now being TIME in whole ms, as lib_queue.lua's
// now_ms reads it: lib_rw.lua's expire_readers, lib_sem.lua's
// expire_holders) before they grant anything, so it holds nothing, and
// inspection does not show it. The server's time is the TIME read in the
// inspection's own pipeline, before the hash.
func (in *inspection) untilOf(r driver.Reply) map[string]time.Duration {
	until := map[string]time.Duration{}
	now := in.srv.UnixMilli()
	for _, z := range zsetOf(r) {
		if in.srv.IsZero() || int64(z.score) > now {
			until[z.member] = in.expiry(z.score)
		}
	}
	return until
}

// LockInfo is what Redis says of one lock at one moment.
type LockInfo struct {
	Kind Kind
	Name string
	Key  string        // the lock's own key
	Held bool          // some holder has it (for a Latch: the latch is closed)
	TTL  time.Duration // the key's time to live: 0 if it does not exist, -1 if it has no expiry
	// Fence is the highest fencing token of its holders (0: free, or
	// held by a script-free Client, whose hold keeps no fence in Redis).
	// A lock's fences come from a counter that it shares with the locks
	// of its cluster slot (of its deployment, off a cluster: internal/protocol/keys.go), so
	// the next one is above it but not necessarily by one.
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
	// Value is an Election's leader's value ("" when nobody leads, or
	// its winner has not recorded one yet).
	Value string
}

// Holder is one owner of a lock.
type Holder struct {
	Token string
	Side  string // an RWMutex's: "read" or "write"
	// Holds is the hold count (1 + re-entries), or a Semaphore holder's
	// permits.
	Holds int64
	Fence int64 // the holder's fencing token (0 if unknown: a script-free hold)
	// Since is when it took the lock (zero if unknown): by the server's
	// clock, or, for a Mutex, FairMutex or Election hold whose first
	// attempt found the lock free, by its Client's clock when it sent
	// that attempt, to a tenth of a second (which saves the server a TIME
	// per Lock).
	Since time.Time
	TTL   time.Duration // how long its hold has left, as the server sees it
	Owner *Owner        // who it is, if its Client said (nil otherwise)
	// Label is what its acquire was given with WithLabel ("" if none, or
	// a script-free or quorum Client's hold).
	Label string
}

// Waiter is one registered waiter.
type Waiter struct {
	Token   string
	Side    string // an RWMutex's: "read" or "write"
	Permits int64  // a Semaphore waiter's
	// Since is when it arrived, by the server's clock (zero for
	// readers). Waiters are served in arrival order whatever that clock
	// does (scripts/lib_queue.lua); where it stood still or stepped back
	// since an earlier waiter came, Since is 1 µs after that waiter's.
	Since   time.Time
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

// reader is the Redis that inspection reads: the Client's, or a quorum's
// first node.
func (c *Client) reader() (driver.Driver, error) {
	if c.rdb != nil {
		return c.rdb, nil
	}
	return nil, c.caps.NotThere("inspection")
}

// Inspect reads one lock: its holders (with who they are, when their
// Clients recorded it), its waiters in order, its TTL and fence, and the
// state of its kind (mode, permits, count). A lock that does not exist is
// returned with Held false and nothing in it. A holder whose own lease has
// run out by the server's clock (an RWMutex reader, a Semaphore permit,
// which another holder's lease keeps in the lock's key) holds nothing —
// the scripts drop it before they grant anything — and is not shown: not
// among Holders, nor in Mode or Free.
func (c *Client) Inspect(ctx context.Context, kd Kind, name string) (*LockInfo, error) {
	return c.inspect(ctx, kd, name, nil)
}

// inspect is Inspect, its owner records read through cache if not nil.
func (c *Client) inspect(ctx context.Context, kd Kind, name string, cache *ownerCache) (*LockInfo, error) {
	if err := checkCall(ctx, c, name); err != nil {
		return nil, err
	}
	r, err := c.reader()
	if err != nil {
		return nil, err
	}
	sp, err := specOf(kd)
	if err != nil {
		return nil, err
	}
	k := c.keys(sp.keys, name)
	info := &LockInfo{Kind: kd, Name: name, Key: k.Lock}
	cmds := []driver.Command{protocol.Cmd("TIME"), protocol.Keyed("TYPE", k.Lock), protocol.Keyed("PTTL", k.Lock)}
	if sp.queue {
		cmds = append(cmds, zrange(k.Queue), zrange(k.Alive))
	}
	base := len(cmds)
	if sp.reads != nil {
		cmds = append(cmds, sp.reads(k)...)
	}
	rs := r.Pipeline(ctx, cmds)
	for _, x := range rs {
		if x.Err != nil {
			return nil, redisErr("inspect", name, x.Err)
		}
	}
	text := func(i int) string { v, _ := rs[i].Text(); return v }
	in := &inspection{info: info, srv: serverTime(rs[0]), fields: map[string]string{}, extra: rs[base:]}
	pttl, _ := rs[2].Int64()
	info.TTL = ttlOf(time.Duration(pttl) * time.Millisecond)
	if sp.queue {
		in.queue, in.alive = zsetOf(rs[3]), zsetOf(rs[4])
	}
	switch typ := text(1); {
	case typ == "string":
		// a mutex's hold, one string (internal/protocol/hold.go); a
		// script-free Mutex's key is its owner's token alone
		g := r.Do(ctx, protocol.Keyed("GET", k.Lock))
		if g.Err != nil {
			return nil, redisErr("inspect", name, g.Err)
		}
		v, err := g.Text() // (an error: the key went since TYPE, v is "")
		if h, ok := protocol.ParseHold(v); ok {
			in.fields = h.Fields()
		} else if err == nil && sp.plain {
			info.Held = true
			info.Holders = []Holder{{Token: v, Holds: 1, TTL: info.TTL}}
			return info, c.fillOwners(ctx, r, info, cache)
		}
	case typ == "hash":
		h := r.Do(ctx, protocol.Keyed("HGETALL", k.Lock))
		if h.Err != nil {
			return nil, redisErr("inspect", name, h.Err)
		}
		in.fields = hashOf(h)
	}
	if !sp.fill(in) {
		return info, nil
	}
	info.Held = len(info.Holders) > 0
	for i, h := range info.Holders {
		info.Fence = max(info.Fence, h.Fence)
		info.Holders[i].Label = in.fields[protocol.FieldLabel+h.Token]
	}
	slices.SortFunc(info.Holders, func(a, b Holder) int {
		return cmp.Or(a.Since.Compare(b.Since), strings.Compare(a.Token, b.Token))
	})
	if sp.waiters != nil {
		sp.waiters(in)
	} else {
		in.queued("", false)
	}
	return info, c.fillOwners(ctx, r, info, cache)
}

// zrange reads a sorted set whole, with scores.
func zrange(key string) driver.Command { return protocol.Keyed("ZRANGE", key, 0, -1, "WITHSCORES") }

// extraInt is the number at the end of a semaphore waiter's member.
func extraInt(member string) int64 {
	n, _ := strconv.ParseInt(member[strings.LastIndexByte(member, ':')+1:], 10, 64)
	return n
}

// zmember is a member of a sorted set and its score.
type zmember struct {
	member string
	score  float64
}

// zsetOf reads a ZRANGE WITHSCORES reply: member, score, ... (RESP2) or
// [member, score] pairs (RESP3); a score is a string or a double.
func zsetOf(r driver.Reply) []zmember {
	vs, _ := r.Slice()
	var out []zmember
	add := func(m, sc any) {
		z := zmember{}
		z.member, _ = m.(string)
		switch v := sc.(type) {
		case float64:
			z.score = v
		case string:
			z.score, _ = strconv.ParseFloat(v, 64)
		case int64:
			z.score = float64(v)
		}
		out = append(out, z)
	}
	for i := 0; i < len(vs); i++ {
		if pair, ok := vs[i].([]any); ok {
			if len(pair) == 2 {
				add(pair[0], pair[1])
			}
			continue
		}
		if i+1 < len(vs) {
			add(vs[i], vs[i+1])
			i++
		}
	}
	return out
}

// hashOf reads an HGETALL reply (keys and values in turn).
func hashOf(r driver.Reply) map[string]string {
	vs, _ := r.Slice()
	out := make(map[string]string, len(vs)/2)
	for i := 0; i+1 < len(vs); i += 2 {
		k, _ := (driver.Reply{Val: vs[i]}).Text()
		v, _ := (driver.Reply{Val: vs[i+1]}).Text()
		out[k] = v
	}
	return out
}

// serverTime reads a TIME reply.
func serverTime(r driver.Reply) time.Time {
	vs, _ := r.Slice()
	if len(vs) != 2 {
		return time.Time{}
	}
	sec, _ := (driver.Reply{Val: vs[0]}).Int64()
	usec, _ := (driver.Reply{Val: vs[1]}).Int64()
	return time.Unix(sec, usec*1000)
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
// with their Client's id. With cache, the records it has are not read
// again, and those read are kept in it.
func (c *Client) fillOwners(ctx context.Context, r driver.Driver, info *LockInfo, cache *ownerCache) error {
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
	var order []string
	var cmds []driver.Command
	for id := range ids {
		if o, ok := cache.get(id); ok {
			ids[id] = o
			continue
		}
		order = append(order, id)
		cmds = append(cmds, protocol.Keyed("HGETALL", deploy.OwnerKey(c.prefix, id)))
	}
	var rs []driver.Reply
	if len(cmds) > 0 {
		rs = r.Pipeline(ctx, cmds)
		if err := backend.FirstErr(rs); err != nil {
			return redisErr("inspect", info.Name, err)
		}
	}
	for i, id := range order {
		f := hashOf(rs[i])
		if len(f) == 0 {
			cache.put(id, nil)
			continue
		}
		o := &Owner{Client: id, Host: f["host"], Program: f["program"], Label: f["label"]}
		o.PID, _ = strconv.Atoi(f["pid"])
		if ms, err := strconv.ParseInt(f["started"], 10, 64); err == nil {
			o.Started = time.UnixMilli(ms)
		}
		ids[id] = o
		cache.put(id, o)
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
// KEYS. A free lock leaves nothing to list (but a Semaphore's capacity
// that SetPermits set: it is listed, free).
func (c *Client) Locks(ctx context.Context, pattern string) ([]*LockInfo, error) {
	if err := checkCall(ctx, c, "*"); err != nil {
		return nil, err
	}
	r, err := c.reader()
	if err != nil {
		return nil, err
	}
	found, err := c.scanPrefix(ctx, r, pattern, false)
	if err != nil {
		return nil, err
	}
	var out []*LockInfo
	for _, l := range found.sorted() {
		info, err := c.Inspect(ctx, l.kd, l.name)
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

// lockID is a lock a scan found.
type lockID struct {
	kd   Kind
	name string
}

// prefixScan is what one SCAN pass found under the Client's prefix: the
// locks whose name matches its pattern, and (a pass over every key of
// the prefix) deadlock detection's records.
type prefixScan struct {
	mu            sync.Mutex
	locks         map[lockID]bool
	waits, broken []string // keys of wait records and of deadlocks broken
	keys          int      // keys walked
}

// scanPrefix walks the prefix's keys once (on a cluster, on every
// master): only its locks' (<prefix>:{*), or with all every key, records
// too. A pattern that path.Match refuses is an invalid argument.
func (c *Client) scanPrefix(ctx context.Context, r driver.Driver, pattern string, all bool) (*prefixScan, error) {
	if pattern != "" {
		if _, err := path.Match(pattern, ""); err != nil {
			return nil, invalid("pattern %q: %v", pattern, err)
		}
	}
	s := &prefixScan{locks: map[lockID]bool{}}
	match := deploy.EscapeGlob(c.prefix) + ":{*"
	if all {
		match = deploy.EscapeGlob(c.prefix) + ":*"
	}
	waitPre, brokenPre := waitKey(c.prefix, ""), brokenKey(c.prefix, "")
	err := c.scan(ctx, r, match, func(keys []string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.keys += len(keys)
		for _, k := range keys {
			switch {
			case strings.HasPrefix(k, waitPre):
				s.waits = append(s.waits, k)
			case strings.HasPrefix(k, brokenPre):
				s.broken = append(s.broken, k)
			default:
				if kd, name, ok := parseKey(c.prefix, k); ok && (pattern == "" || matches(pattern, name)) {
					s.locks[lockID{kd, name}] = true
				}
			}
		}
	})
	if err != nil {
		return nil, redisErr("scan", pattern, err)
	}
	return s, nil
}

// sorted returns the locks found, by name, then kind.
func (s *prefixScan) sorted() []lockID {
	ids := make([]lockID, 0, len(s.locks))
	for l := range s.locks {
		ids = append(ids, l)
	}
	slices.SortFunc(ids, func(a, b lockID) int {
		return cmp.Or(strings.Compare(a.name, b.name), strings.Compare(string(a.kd), string(b.kd)))
	})
	return ids
}

// scan walks the keys that match pattern with SCAN — on a cluster, on
// every master at once (fn must be safe for that) — never KEYS.
func (c *Client) scan(ctx context.Context, r driver.Driver, pattern string, fn func(keys []string)) error {
	nodes, err := r.Masters(ctx)
	if err != nil {
		return err
	}
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			errs[i] = deploy.ScanKeys(ctx, n, pattern, func(keys []string) error { fn(keys); return nil })
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func matches(pattern, name string) bool {
	ok, _ := path.Match(pattern, name)
	return ok
}

// parseKey tells the kind and name of a lock from one of its keys
// (protocol.ParseKey); ok is false for keys that are not a lock's.
func parseKey(prefix, key string) (Kind, string, bool) {
	kd, name, ok := protocol.ParseKey(prefix, key)
	if !ok {
		return "", "", false
	}
	return Kind(kd.Name), name, true
}

// forceReceipt names one ForceUnlock, so that a copy of its script that
// the client library sends again (a lost reply, a read timeout: the
// server may run both copies) answers as the first did and frees nothing
// more. Without it a copy that runs after another owner took the freed
// lock would free that owner's lock too: a ForceUnlock of one holder
// would end two. The script leaves 'force:<id>:<its reply>' in the lock's
// dead set (bury.lua's; owner tokens are hex, so no token is ever taken
// for it) for ttl, and a script that finds its id there changes nothing
// and answers that reply. A copy later than ttl would free the lock again,
// as a second ForceUnlock would: ttl is a minute (longer than go-redis's
// default retries of one command take: 4 tries of a 3 s read timeout),
// or until ctx's deadline if that is later, since a client library
// re-sends only within the call.
type forceReceipt struct {
	id  string
	ttl int64 // milliseconds
}

func newForceReceipt(ctx context.Context) forceReceipt {
	ttl := time.Minute
	if dl, ok := ctx.Deadline(); ok {
		ttl = max(ttl, time.Until(dl))
	}
	return forceReceipt{id: randomHex(16), ttl: ttl.Milliseconds()}
}

// ForceUnlock frees a lock whoever holds it — an operator's last resort
// for a lock pinned by a holder that cannot be reached — and hands it to
// its next waiters as a release would. For a Semaphore every permit comes
// back; a Latch is opened. Holders learn of the loss at their next
// renewal (their work may still be running: fences are what protects the
// resources). It returns what the lock was just before. A call the client
// library sends twice (a re-send after a lost reply) frees the lock once:
// an owner that took it between the two copies keeps it.
func (c *Client) ForceUnlock(ctx context.Context, kd Kind, name string) (*LockInfo, error) {
	before, err := c.Inspect(ctx, kd, name)
	if err != nil {
		return nil, err
	}
	sp, _ := specOf(kd) // known: Inspect checked it
	if err := c.caps.Supports(sp.primitive); err != nil {
		return nil, err
	}
	r, _ := c.reader()
	if err := sp.force(ctx, c, r, c.keys(sp.keys, name), newForceReceipt(ctx)).Err; err != nil {
		return nil, redisErr("unlock --force", name, err)
	}
	return before, nil
}

// Keys are the Redis names of a Mutex (or FairMutex), for tools that inspect or
// administer locks by hand (cmd/dlock does) and for ACL rules. All of them
// share the hash tag {<escaped name>}: '%', '{' and '}' in the name are
// escaped as %25, %7B and %7D.
type Keys struct {
	Lock string // the lock: its hold, one string '<token> <fence> <stamp> <count> <seq> <lablen>[v] <label><value>' (the owner's token alone WithoutScripts)
	// Fence is the fencing counter the lock's fences come from, off a
	// Redis Cluster: every lock of the prefix shares it. It never
	// expires.
	Fence string
	// SlotFence is the counter on a Redis Cluster: every lock of the
	// lock's hash slot shares it. It never expires.
	SlotFence string
	Channel   string // the pub/sub channel releases are published on
}

// KeysOf returns the Keys of the Mutex called name, as a Client made
// WithPrefix(prefix) names them. It returns an error matching
// ErrInvalidArgument for an empty name, or a prefix that New refuses.
func KeysOf(prefix, name string) (Keys, error) {
	if !protocol.ValidPrefix(prefix) {
		return Keys{}, invalid("key prefix %q: must be non-empty, without '{' or '}'", prefix)
	}
	if name == "" {
		return Keys{}, invalid("empty lock name")
	}
	k := protocol.NewKeys(prefix, protocol.MutexKind, name)
	return Keys{Lock: k.Lock, Fence: k.Fence, SlotFence: protocol.FenceKey(prefix, k.Lock, true), Channel: k.Channel}, nil
}
