package dlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
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

// kinds maps a Kind to its key layout.
var kinds = map[Kind]kind{KindMutex: kindMutex, KindRWMutex: kindRW, KindSemaphore: kindSemaphore,
	KindLatch: kindLatch, KindElection: kindElection}

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

// reader is the Redis that inspection reads: the Client's, or a quorum's
// first node.
func (c *Client) reader() (Driver, error) {
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
		return nil, invalid("lock kind %q: want mutex, rwmutex, semaphore, latch or election", kd)
	}
	k := c.keys(lk, name)
	info := &LockInfo{Kind: kd, Name: name, Key: k.lock}
	cmds := []Command{cmd("TIME"), keyed("TYPE", k.lock), keyed("PTTL", k.lock), keyed("GET", k.fence)}
	zrange := func(key string) int {
		cmds = append(cmds, keyed("ZRANGE", key, 0, -1, "WITHSCORES"))
		return len(cmds) - 1
	}
	var str, permits, leases, readers, rqueue, rphase, queue, alive int
	switch kd {
	case KindLatch:
		cmds = append(cmds, keyed("GET", k.lock))
		str = len(cmds) - 1
	case KindSemaphore:
		cmds = append(cmds, keyed("GET", k.permits))
		permits = len(cmds) - 1
		leases = zrange(k.leases)
	case KindRWMutex:
		readers, rqueue, rphase = zrange(k.readers), zrange(k.rqueue), zrange(k.rphase)
	}
	if kd != KindLatch {
		queue, alive = zrange(k.queue), zrange(k.alive)
	}
	rs := r.Pipeline(ctx, cmds)
	for _, x := range rs {
		if x.Err != nil {
			return nil, redisErr("inspect", name, x.Err)
		}
	}
	text := func(i int) string { v, _ := rs[i].Text(); return v }
	srv := serverTime(rs[0])
	pttl, _ := rs[2].Int64()
	info.TTL = ttlOf(time.Duration(pttl) * time.Millisecond)
	info.Fence, _ = strconv.ParseInt(text(3), 10, 64)
	if kd == KindLatch {
		info.Count, _ = strconv.ParseInt(text(str), 10, 64)
		info.Held = info.Count > 0
		return info, nil
	}
	typ := text(1)
	if typ == "string" { // a script-free mutex: the value is the owner's token
		tok, err := r.Do(ctx, keyed("GET", k.lock)).Text()
		if err == nil {
			info.Held = true
			info.Holders = []Holder{{Token: tok, Holds: 1, Fence: info.Fence, TTL: info.TTL}}
		}
		return info, c.fillOwners(ctx, r, info)
	}
	fields := map[string]string{}
	if typ == "hash" {
		h := r.Do(ctx, keyed("HGETALL", k.lock))
		if h.Err != nil {
			return nil, redisErr("inspect", name, h.Err)
		}
		fields = hashOf(h)
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
	case KindMutex, KindElection:
		for f, v := range fields {
			switch {
			case f == "@next":
				info.KeptFor = v
			case strings.HasPrefix(f, fieldValue):
				info.Value = v
			case strings.HasPrefix(f, fieldTaken), strings.HasPrefix(f, fieldSeq):
			default:
				n, _ := strconv.ParseInt(v, 10, 64)
				info.Holders = append(info.Holders, Holder{Token: f, Holds: n, Fence: info.Fence,
					Since: msAt(fields[fieldTaken+f]), TTL: info.TTL})
			}
		}
	case KindRWMutex:
		info.Mode = fields[fieldMode]
		until := map[string]time.Duration{}
		for _, z := range zsetOf(rs[readers]) {
			until[z.member] = expiry(z.score)
		}
		for f, v := range fields {
			side, tok, ok := strings.Cut(f, ":")
			if !ok || (side != "r" && side != "w") {
				continue
			}
			n, _ := strconv.ParseInt(v, 10, 64)
			h := Holder{Token: tok, Side: map[string]string{"r": "read", "w": "write"}[side], Holds: n,
				Since: msAt(fields[fieldTaken+tok]), TTL: info.TTL}
			h.Fence, _ = strconv.ParseInt(fields[fieldFence+tok], 10, 64)
			if side == "r" {
				h.TTL = until[tok]
			}
			info.Holders = append(info.Holders, h)
		}
	case KindSemaphore:
		info.Capacity, _ = strconv.ParseInt(text(permits), 10, 64)
		until := map[string]time.Duration{}
		for _, z := range zsetOf(rs[leases]) {
			until[z.member] = expiry(z.score)
		}
		used := int64(0)
		for f, v := range fields {
			tok, ok := strings.CutPrefix(f, fieldPermits)
			if !ok {
				continue
			}
			n, _ := strconv.ParseInt(v, 10, 64)
			used += n
			h := Holder{Token: tok, Holds: n, Since: msAt(fields[fieldTaken+tok]), TTL: until[tok]}
			h.Fence, _ = strconv.ParseInt(fields[fieldFence+tok], 10, 64)
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
	readersIn := func(zs []zmember) {
		for _, z := range zs {
			w := Waiter{Token: tokenOf(z.member)}
			w.Side, w.Expires = "read", expiry(z.score)
			info.Waiters = append(info.Waiters, w)
		}
	}
	if kd == KindRWMutex {
		readersIn(zsetOf(rs[rphase]))
	}
	places := map[string]float64{}
	for _, z := range zsetOf(rs[alive]) {
		places[z.member] = z.score
	}
	for _, z := range zsetOf(rs[queue]) {
		m := z.member
		w := Waiter{Token: tokenOf(m)}
		w.Since = time.UnixMicro(int64(z.score))
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
		readersIn(zsetOf(rs[rqueue]))
	}
	return info, c.fillOwners(ctx, r, info)
}

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
func zsetOf(r Reply) []zmember {
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
func hashOf(r Reply) map[string]string {
	vs, _ := r.Slice()
	out := make(map[string]string, len(vs)/2)
	for i := 0; i+1 < len(vs); i += 2 {
		k, _ := (Reply{Val: vs[i]}).Text()
		v, _ := (Reply{Val: vs[i+1]}).Text()
		out[k] = v
	}
	return out
}

// serverTime reads a TIME reply.
func serverTime(r Reply) time.Time {
	vs, _ := r.Slice()
	if len(vs) != 2 {
		return time.Time{}
	}
	sec, _ := (Reply{Val: vs[0]}).Int64()
	usec, _ := (Reply{Val: vs[1]}).Int64()
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
// with their Client's id.
func (c *Client) fillOwners(ctx context.Context, r Driver, info *LockInfo) error {
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
	var order []string
	var cmds []Command
	for id := range ids {
		order = append(order, id)
		cmds = append(cmds, keyed("HGETALL", ownerKey(c.prefix, id)))
	}
	rs := r.Pipeline(ctx, cmds)
	if err := firstErr(rs); err != nil {
		return redisErr("inspect", info.Name, err)
	}
	for i, id := range order {
		f := hashOf(rs[i])
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
	scan := func(ctx context.Context, r Driver) error {
		cursor := "0"
		for {
			v, err := r.Do(ctx, cmd("SCAN", cursor, "MATCH", c.prefix+":{*", "COUNT", 1000)).Slice()
			if err != nil {
				return err
			}
			if len(v) != 2 {
				return fmt.Errorf("dlock: SCAN: unexpected reply")
			}
			cursor, _ = v[0].(string)
			keys, _ := v[1].([]any)
			for _, key := range keys {
				s, _ := key.(string)
				kd, name, ok := parseKey(c.prefix, s)
				if ok && (pattern == "" || matches(pattern, name)) {
					mu.Lock()
					found[id{kd, name}] = true
					mu.Unlock()
				}
			}
			if cursor == "0" || cursor == "" {
				return nil
			}
		}
	}
	nodes, err := r.Masters(ctx)
	if err == nil {
		errs := make([]error, len(nodes))
		var wg sync.WaitGroup
		for i, n := range nodes {
			wg.Go(func() { errs[i] = scan(ctx, n) })
		}
		wg.Wait()
		err = errors.Join(errs...)
	}
	if err != nil {
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
	case string(kindElection):
		return KindElection, name, true
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
	if err := c.caps.supports(map[Kind]string{KindMutex: "Mutex", KindRWMutex: "RWMutex",
		KindSemaphore: "Semaphore", KindLatch: "Latch", KindElection: "Election"}[kd]); err != nil {
		return nil, err
	}
	r, _ := c.reader()
	k := c.keys(kinds[kd], name)
	w := c.wakeTo(k)
	var cmd Reply
	switch kd {
	case KindMutex:
		if !c.caps.directed { // script-free: a plain key
			cmd = r.Do(ctx, keyed("DEL", k.lock))
			break
		}
		cmd = forceScript.run(ctx, r, []string{k.lock, k.fence, k.queue, k.alive}, w.baseArg, w.publishArg)
	case KindElection: // and its observers are told
		cmd = forceScript.run(ctx, r, []string{k.lock, k.fence, k.queue, k.alive}, w.baseArg, w.publishArg, k.channel)
	case KindRWMutex:
		cmd = rwForceScript.run(ctx, r, []string{k.lock, k.readers, k.queue, k.alive, k.rqueue, k.rphase}, w.baseArg, w.publishArg)
	case KindSemaphore:
		cmd = semForceScript.run(ctx, r, []string{k.lock, k.leases, k.permits, k.queue, k.alive}, w.baseArg, w.publishArg)
	case KindLatch:
		cmd = latchOpenScript.run(ctx, r, []string{k.lock, k.ids}, k.channel, c.publish)
	}
	if err := cmd.Err; err != nil {
		return nil, redisErr("unlock --force", name, err)
	}
	return before, nil
}
