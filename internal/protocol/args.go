package protocol

import (
	"sync/atomic"
	"time"
)

// The arguments of each script, named and typed: one struct per script,
// its fields in ARGV order, each tagged with the slots it fills
// (`lua:"ARGV[n]"`); a bool field tagged `lua:"variant"` selects optional
// trailing keys or arguments. A struct's Call makes the script's call
// from the lock's keys and those arguments, by hand (no reflection: it
// runs at every call); the boxed-once values stay boxed once (a lock's
// MutexWords, WakeTo's BaseArg and PublishArg, Flag's "1" and "0").
// Each script's header names its KEYS and ARGV, one slot a line ending
// "(go: Name)"; TestScriptHeadersMatchGo checks that the header and the
// struct agree, slot by slot, in every variant.

// ttlWords boxes the lease TTLs of lock.lua and unlock.lua (boxCache): a
// program's locks mostly share one.
var ttlWords boxCache[int64]

// LockArgs are lock.lua's: acquire, re-enter, or an Election's Campaign.
type LockArgs struct {
	Token    string `lua:"ARGV[1]"`
	TTL      int64  `lua:"ARGV[2]"` // ms
	Count    int    `lua:"ARGV[3]"` // 0 to acquire; n >= 2 to re-enter
	Member   string `lua:"ARGV[4]"`
	PlaceTTL int64  `lua:"ARGV[5]"` // ms
	Fair     bool   `lua:"ARGV[6]"`
	Wake     WakeTo `lua:"ARGV[7],ARGV[8]"`
	Queued   bool   `lua:"ARGV[9]"`
	// Reentry adds Seq, the re-entry's place in the hold's sequence.
	Reentry bool  `lua:"variant"`
	Seq     int64 `lua:"ARGV[10]"`
	// Campaign adds Tail (the candidate's value after its label, if
	// any: HoldTail) and Observers (ARGV[10] is '' then).
	Campaign  bool   `lua:"variant"`
	Tail      string `lua:"ARGV[11]"`
	Observers string `lua:"ARGV[12]"`
	// Labelled adds Tail (the hold's label: HoldTail) to a Mutex's or
	// FairMutex's acquire (ARGV[10] is '' then).
	Labelled bool `lua:"variant"`
}

// Call is lock.lua's call on k (a mutex's or an Election's keys).
func (a LockArgs) Call(k *Keys) Call {
	return a.callIn(k, make([]any, 3+len(k.MutexWords)+a.argc()))
}

// callIn is Call in words, made by the caller.
func (a LockArgs) callIn(k *Keys, words []any) Call {
	call, args := boxedIn(LockScript, k.MutexWords[:], words)
	args[0], args[1], args[2], args[3], args[4] = a.Token, ttlWords.box(a.TTL), a.Count, a.Member, a.PlaceTTL
	args[5], args[6], args[7], args[8] = Flag(a.Fair), a.Wake.BaseArg, a.Wake.PublishArg, Flag(a.Queued)
	switch {
	case a.Campaign:
		args[9], args[10], args[11] = "", a.Tail, a.Observers
	case a.Reentry:
		args[9] = a.Seq
	case a.Labelled:
		args[9], args[10] = "", a.Tail
	}
	return call
}

// Acquire is the call of an attempt to acquire (Count 0) a mutex on k
// (a Mutex's, a FairMutex's or an Election's keys): a first attempt (not
// Queued) goes as lock_fast.lua, with lock.lua's call to make in its
// place when the lock is contended, unless k was found contended lately
// (doc.go, "Fast scripts").
func (a LockArgs) Acquire(k *Keys) Call {
	first := !a.Queued && !a.Reentry && a.Count == 0
	if !first || k.Contended() {
		c := a.Call(k)
		if first {
			c.hint = k // kept while the lock is found held
		}
		return c
	}
	fast := LockFastArgs{Token: a.Token, TTL: a.TTL, Fair: a.Fair, Campaign: a.Campaign, Labelled: a.Labelled && !a.Campaign}
	nf, n := fast.words(), 3+len(k.MutexWords)+a.argc()
	words := make([]any, nf+n) // one allocation for both calls
	full := a.callIn(k, words[nf:])
	c := fast.call(k, words[:nf:nf], full.Args, stampWord())
	c.full, c.fullS, c.hint = words[nf:], &LockScript, k
	return c
}

// argc is how many arguments lock.lua's call takes.
func (a LockArgs) argc() int {
	switch {
	case a.Campaign:
		return 12
	case a.Reentry:
		return 10
	case a.Labelled:
		return 11
	}
	return 9
}

// LockFastArgs are lock_fast.lua's: a first attempt to acquire a mutex
// that nobody waits for (LockArgs.Acquire).
type LockFastArgs struct {
	Token string `lua:"ARGV[1]"`
	TTL   int64  `lua:"ARGV[2]"` // ms
	Stamp int64  `lua:"ARGV[3]"` // the Client's clock, Unix ms (0: now)
	// Fair adds the queue, which must be empty.
	Fair bool `lua:"variant"`
	// Campaign adds the hold's tail (an Election candidate's value after
	// its label: HoldTail), recorded with the hold, and the observers'
	// channel, told.
	Campaign  bool   `lua:"variant"`
	Tail      string `lua:"ARGV[4]"`
	Observers string `lua:"ARGV[5]"`
	Publish   string `lua:"ARGV[6]"` // PUBLISH or SPUBLISH
	// Labelled adds the hold's tail (its label: HoldTail) alone.
	Labelled bool `lua:"variant"`
}

// words is the length of the call's EVALSHA.
func (a LockFastArgs) words() int {
	n := 3 + 3 + 3
	if a.Fair {
		n++
	}
	if a.Campaign {
		n += 3
	} else if a.Labelled {
		n++
	}
	return n
}

// Call is lock_fast.lua's call on k (whose Client has not found it
// contended), as LockArgs.Acquire makes it: so TestScriptHeadersMatchGo
// checks what Acquire sends.
func (a LockFastArgs) Call(k *Keys) Call {
	full := LockArgs{Token: a.Token, TTL: a.TTL, Fair: a.Fair, Wake: WakeTo{Publish: a.Publish, PublishArg: a.Publish}}
	if a.Campaign {
		full.Campaign, full.Tail, full.Observers = true, a.Tail, a.Observers
	} else if a.Labelled {
		full.Labelled, full.Tail = true, a.Tail
	}
	c := full.Acquire(k)
	if a.Stamp != 0 && c.S.SHA == LockFastScript.SHA {
		c.Args[2] = a.Stamp
	}
	return c
}

// call fills words with the call, taking its arguments from full, the
// same call's lock.lua arguments, boxed (a string made an interface anew
// would cost an allocation), and stamp, the Client's clock (Unix ms,
// boxed).
func (a LockFastArgs) call(k *Keys, words []any, full []any, stamp any) Call {
	w := k.MutexWords
	words[0], words[1], words[3], words[4], words[5] = evalSHA, LockFastScript.SHAArg, w[0], w[1], w[4]
	nk := 3
	if a.Fair {
		words[6], nk = w[2], 4
	}
	words[2] = nk
	args := words[3+nk:]
	args[0], args[1], args[2] = full[0], full[1], stamp // token, TTL, when
	if a.Campaign {
		args[3], args[4], args[5] = full[10], full[11], full[7] // tail, observers, publish
	} else if a.Labelled {
		args[3] = full[10] // tail
	}
	return Call{S: LockFastScript, Boxed: words[3 : 3+nk], Args: args, words: words}
}

// stampWord is the clock now, Unix ms rounded down to a tenth of a
// second, boxed: lock_fast.lua's Stamp (what an inspector shows as when
// the hold was taken; a tenth of a second is all it needs). A number
// boxed anew costs an allocation, so the box is kept while the clock
// stays in its tenth: at ten acquires a second and more, most share one
// (to the millisecond, a Lock+Unlock slower than a millisecond — a loaded
// machine's — paid one each: TestUncontendedAllocations saw it).
func stampWord() any {
	ms := time.Now().UnixMilli()
	ms -= ms % stampGrain
	if b := lastStamp.Load(); b != nil && b.ms == ms {
		return b.word
	}
	b := &stampBox{ms: ms, word: ms}
	lastStamp.Store(b)
	return b.word
}

type stampBox struct {
	ms   int64
	word any
}

var lastStamp atomic.Pointer[stampBox]

// stampGrain is the stamp's resolution, in ms.
const stampGrain = 100

// UnlockArgs are unlock.lua's: release holds, or (Free) the final
// release with its receipt.
type UnlockArgs struct {
	Token     string `lua:"ARGV[1]"`
	Left      int    `lua:"ARGV[2]"`
	Wake      WakeTo `lua:"ARGV[3],ARGV[4]"`
	Reserve   bool   `lua:"ARGV[5]"`
	Observers string `lua:"ARGV[6]"` // an Election's; '' for a mutex
	Seq       int64  `lua:"ARGV[7]"`
	// Free adds the hold's fence and its receipt's TTL.
	Free       bool  `lua:"variant"`
	Fence      int64 `lua:"ARGV[8]"`
	ReceiptTTL int64 `lua:"ARGV[9]"` // ms
}

// Call is unlock.lua's call on k.
func (a UnlockArgs) Call(k *Keys) Call {
	n := 7
	if a.Free {
		n = 9
	}
	return a.callIn(k, make([]any, 3+len(k.MutexWords)+n))
}

// callIn is Call in words, made by the caller.
func (a UnlockArgs) callIn(k *Keys, words []any) Call {
	call, args := boxedIn(UnlockScript, k.MutexWords[:], words)
	args[0], args[1], args[2], args[3] = a.Token, a.Left, a.Wake.BaseArg, a.Wake.PublishArg
	args[4], args[5], args[6] = Flag(a.Reserve), a.Observers, a.Seq
	if a.Free {
		args[7], args[8] = a.Fence, ttlWords.box(a.ReceiptTTL)
	}
	return call
}

// FreeCall is the call of the final release (Free) of a mutex hold on k
// (a Mutex's, a FairMutex's or an Election's): as unlock_fast.lua, with
// unlock.lua's call to make in its place when somebody waits, unless k
// was found contended lately (doc.go, "Fast scripts").
func (a UnlockArgs) FreeCall(k *Keys) Call {
	if !a.Free || a.Left != 0 || k.Contended() {
		return a.Call(k)
	}
	fast := UnlockFastArgs{Token: a.Token, Fence: a.Fence, Election: a.Observers != ""}
	nf, n := fast.words(), 3+5+9
	words := make([]any, nf+n) // one allocation for both calls
	full := a.callIn(k, words[nf:])
	c := fast.call(k, words[:nf:nf], full.Args)
	c.full, c.fullS, c.hint = words[nf:], &UnlockScript, k
	return c
}

// UnlockFastArgs are unlock_fast.lua's: the final release of a mutex
// hold that nobody waits for (UnlockArgs.FreeCall).
type UnlockFastArgs struct {
	Token string `lua:"ARGV[1]"`
	Fence int64  `lua:"ARGV[2]"`
	// Election adds the observers' channel, told, and the receipt's TTL.
	Election   bool   `lua:"variant"`
	Observers  string `lua:"ARGV[3]"`
	Publish    string `lua:"ARGV[4]"` // PUBLISH or SPUBLISH
	ReceiptTTL int64  `lua:"ARGV[5]"` // ms
}

// words is the length of the call's EVALSHA.
func (a UnlockFastArgs) words() int {
	if a.Election {
		return 3 + 4 + 5
	}
	return 3 + 4 + 2
}

// Call is unlock_fast.lua's call on k (whose Client has not found it
// contended), as UnlockArgs.FreeCall makes it: so TestScriptHeadersMatchGo
// checks what FreeCall sends.
func (a UnlockFastArgs) Call(k *Keys) Call {
	full := UnlockArgs{Token: a.Token, Free: true, Fence: a.Fence, ReceiptTTL: a.ReceiptTTL,
		Wake: WakeTo{Publish: a.Publish, PublishArg: a.Publish}}
	if a.Election {
		full.Observers = a.Observers
	}
	return full.FreeCall(k)
}

// call fills words with the call, taking its arguments from full, the
// same call's unlock.lua arguments, boxed.
func (a UnlockFastArgs) call(k *Keys, words []any, full []any) Call {
	w := k.MutexWords
	words[0], words[1], words[2] = evalSHA, UnlockFastScript.SHAArg, 4
	words[3], words[4], words[5], words[6] = w[0], w[1], w[2], w[4]
	args := words[7:]
	args[0], args[1] = full[0], full[7] // token, fence
	if a.Election {
		args[2], args[3], args[4] = full[5], full[3], full[8] // observers, publish, receipt TTL
	}
	return Call{S: UnlockFastScript, Boxed: words[3:7], Args: args, words: words}
}

// LeaveArgs are leave.lua's: a mutex's waiter gives up its place.
type LeaveArgs struct {
	Member  string `lua:"ARGV[1]"`
	Wake    WakeTo `lua:"ARGV[2],ARGV[3]"`
	Reserve bool   `lua:"ARGV[4]"`
}

// Call is leave.lua's call on k.
func (a LeaveArgs) Call(k *Keys) Call {
	return Call{S: LeaveScript, Keys: []string{k.Lock, k.Fence, k.Queue, k.Alive},
		Args: []any{a.Member, a.Wake.BaseArg, a.Wake.PublishArg, Flag(a.Reserve)}}
}

// ForceArgs are force.lua's: ForceUnlock of a mutex or an Election.
type ForceArgs struct {
	Wake       WakeTo `lua:"ARGV[1],ARGV[2]"`
	ID         string `lua:"ARGV[3]"`
	ReceiptTTL int64  `lua:"ARGV[4]"` // ms
	// Election adds the observers' channel, told 'all'.
	Election  bool   `lua:"variant"`
	Observers string `lua:"ARGV[5]"`
}

// Call is force.lua's call on k.
func (a ForceArgs) Call(k *Keys) Call {
	args := []any{a.Wake.BaseArg, a.Wake.PublishArg, a.ID, a.ReceiptTTL}
	if a.Election {
		args = append(args, a.Observers)
	}
	return Call{S: ForceScript, Keys: []string{k.Lock, k.Fence, k.Queue, k.Alive, k.Dead}, Args: args}
}

// ElectArgs are elect.lua's: a leader records its value.
type ElectArgs struct {
	Token     string `lua:"ARGV[1]"`
	Value     string `lua:"ARGV[2]"`
	Observers string `lua:"ARGV[3]"`
	Publish   string `lua:"ARGV[4]"` // PUBLISH or SPUBLISH
	Seq       int64  `lua:"ARGV[5]"`
}

// Call is elect.lua's call on k.
func (a ElectArgs) Call(k *Keys) Call {
	return Call{S: ElectScript, Keys: []string{k.Lock}, Args: []any{a.Token, a.Value, a.Observers, a.Publish, a.Seq}}
}

// ElectReadArgs are elect_read.lua's: none.
type ElectReadArgs struct{}

// Call is elect_read.lua's call on k.
func (ElectReadArgs) Call(k *Keys) Call {
	return Call{S: ElectReadScript, Keys: []string{k.Lock}}
}

// RenewArgs are renew.lua's: a mutex hold's lease renewed or set.
type RenewArgs struct {
	Token string `lua:"ARGV[1]"`
	TTL   int64  `lua:"ARGV[2]"` // ms
	Exact bool   `lua:"ARGV[3]"`
	Seq   int64  `lua:"ARGV[4]"`
}

// Call is renew.lua's call on k.
func (a RenewArgs) Call(k *Keys) Call {
	return Call{S: RenewScript, Keys: []string{k.Lock}, Args: []any{a.Token, a.TTL, Flag(a.Exact), a.Seq}}
}

// TTLArgs are ttl.lua's: a mutex hold's time left.
type TTLArgs struct {
	Token string `lua:"ARGV[1]"`
}

// Call is ttl.lua's call on k.
func (a TTLArgs) Call(k *Keys) Call {
	return Call{S: TTLScript, Keys: []string{k.Lock}, Args: []any{a.Token}}
}

// RWAcquireKeys are the keys of rw_read.lua and rw_write.lua.
func RWAcquireKeys(k *Keys) []string {
	return []string{k.Lock, k.Fence, k.Readers, k.Queue, k.Alive, k.RQueue, k.RPhase, k.Dead}
}

// RWReadArgs are rw_read.lua's: a read hold acquired or re-entered.
type RWReadArgs struct {
	Token    string `lua:"ARGV[1]"`
	TTL      int64  `lua:"ARGV[2]"` // ms
	Count    int    `lua:"ARGV[3]"`
	Readers  bool   `lua:"ARGV[4]"` // reader preference
	Member   string `lua:"ARGV[5]"`
	PlaceTTL int64  `lua:"ARGV[6]"` // ms
	Parent   string `lua:"ARGV[7]"` // the caller's own write hold's token
	// Reentry adds Seq.
	Reentry bool  `lua:"variant"`
	Seq     int64 `lua:"ARGV[8]"`
}

// Call is rw_read.lua's call on k.
func (a RWReadArgs) Call(k *Keys) Call {
	n := 7
	if a.Reentry {
		n = 8
	}
	args := make([]any, 7, n)
	args[0], args[1], args[2], args[3] = a.Token, a.TTL, a.Count, Flag(a.Readers)
	args[4], args[5], args[6] = a.Member, a.PlaceTTL, a.Parent
	if a.Reentry {
		args = append(args, a.Seq)
	}
	return Call{S: RWReadScript, Keys: RWAcquireKeys(k), Args: args}
}

// RWWriteArgs are rw_write.lua's: the write hold acquired or re-entered.
type RWWriteArgs struct {
	Token    string `lua:"ARGV[1]"`
	TTL      int64  `lua:"ARGV[2]"` // ms
	Count    int    `lua:"ARGV[3]"`
	Member   string `lua:"ARGV[4]"`
	PlaceTTL int64  `lua:"ARGV[5]"` // ms
	Wake     WakeTo `lua:"ARGV[6],ARGV[7]"`
	// Reentry adds Seq.
	Reentry bool  `lua:"variant"`
	Seq     int64 `lua:"ARGV[8]"`
}

// Call is rw_write.lua's call on k.
func (a RWWriteArgs) Call(k *Keys) Call {
	n := 7
	if a.Reentry {
		n = 8
	}
	args := make([]any, 7, n)
	args[0], args[1], args[2], args[3] = a.Token, a.TTL, a.Count, a.Member
	args[4], args[5], args[6] = a.PlaceTTL, a.Wake.BaseArg, a.Wake.PublishArg
	if a.Reentry {
		args = append(args, a.Seq)
	}
	return Call{S: RWWriteScript, Keys: RWAcquireKeys(k), Args: args}
}

// RWUnlockArgs are rw_unlock.lua's: release holds, or (Receipt) the
// final release, which leaves its receipt in the dead set (receipt in
// lib_queue.lua).
type RWUnlockArgs struct {
	Token string `lua:"ARGV[1]"`
	Side  string `lua:"ARGV[2]"` // 'r' or 'w'
	Left  int    `lua:"ARGV[3]"`
	Wake  WakeTo `lua:"ARGV[4],ARGV[5]"`
	Seq   int64  `lua:"ARGV[6]"`
	// Receipt adds the dead set (a last key) and the receipt's TTL.
	Receipt    bool  `lua:"variant"`
	ReceiptTTL int64 `lua:"ARGV[7]"` // ms
}

// Call is rw_unlock.lua's call on k.
func (a RWUnlockArgs) Call(k *Keys) Call {
	n := 6
	if a.Receipt {
		n = 7
	}
	args := make([]any, 6, n)
	args[0], args[1], args[2], args[3], args[4], args[5] = a.Token, a.Side, a.Left, a.Wake.BaseArg, a.Wake.PublishArg, a.Seq
	keys := []string{k.Lock, k.Readers, k.Queue, k.Alive, k.RQueue, k.RPhase}
	if a.Receipt {
		keys = append(keys, k.Dead)
		args = append(args, a.ReceiptTTL)
	}
	return Call{S: RWUnlockScript, Keys: keys, Args: args}
}

// RWLeaveArgs are rw_leave.lua's: a reader or writer gives up its wait.
type RWLeaveArgs struct {
	Member string `lua:"ARGV[1]"`
	Side   string `lua:"ARGV[2]"`
	Wake   WakeTo `lua:"ARGV[3],ARGV[4]"`
}

// Call is rw_leave.lua's call on k.
func (a RWLeaveArgs) Call(k *Keys) Call {
	return Call{S: RWLeaveScript, Keys: []string{k.Lock, k.Queue, k.Alive, k.RQueue, k.RPhase},
		Args: []any{a.Member, a.Side, a.Wake.BaseArg, a.Wake.PublishArg}}
}

// RWRenewArgs are rw_renew.lua's.
type RWRenewArgs struct {
	Token string `lua:"ARGV[1]"`
	Side  string `lua:"ARGV[2]"`
	TTL   int64  `lua:"ARGV[3]"` // ms
	Exact bool   `lua:"ARGV[4]"`
	Seq   int64  `lua:"ARGV[5]"`
}

// Call is rw_renew.lua's call on k.
func (a RWRenewArgs) Call(k *Keys) Call {
	return Call{S: RWRenewScript, Keys: []string{k.Lock, k.Readers}, Args: []any{a.Token, a.Side, a.TTL, Flag(a.Exact), a.Seq}}
}

// RWTTLArgs are rw_ttl.lua's.
type RWTTLArgs struct {
	Token string `lua:"ARGV[1]"`
	Side  string `lua:"ARGV[2]"`
}

// Call is rw_ttl.lua's call on k.
func (a RWTTLArgs) Call(k *Keys) Call {
	return Call{S: RWTTLScript, Keys: []string{k.Lock, k.Readers}, Args: []any{a.Token, a.Side}}
}

// RWForceArgs are rw_force.lua's: ForceUnlock of an RWMutex.
type RWForceArgs struct {
	Wake       WakeTo `lua:"ARGV[1],ARGV[2]"`
	ID         string `lua:"ARGV[3]"`
	ReceiptTTL int64  `lua:"ARGV[4]"` // ms
}

// Call is rw_force.lua's call on k.
func (a RWForceArgs) Call(k *Keys) Call {
	return Call{S: RWForceScript, Keys: []string{k.Lock, k.Readers, k.Queue, k.Alive, k.RQueue, k.RPhase, k.Dead},
		Args: []any{a.Wake.BaseArg, a.Wake.PublishArg, a.ID, a.ReceiptTTL}}
}

// SemAcquireArgs are sem_acquire.lua's.
type SemAcquireArgs struct {
	Token    string `lua:"ARGV[1]"`
	TTL      int64  `lua:"ARGV[2]"` // ms
	Permits  int    `lua:"ARGV[3]"` // wanted
	Capacity int    `lua:"ARGV[4]"` // set if the semaphore has none
	Member   string `lua:"ARGV[5]"`
	PlaceTTL int64  `lua:"ARGV[6]"` // ms
}

// Call is sem_acquire.lua's call on k.
func (a SemAcquireArgs) Call(k *Keys) Call {
	return Call{S: SemAcquireScript, Keys: []string{k.Lock, k.Fence, k.Leases, k.Permits, k.Queue, k.Alive, k.Dead},
		Args: []any{a.Token, a.TTL, a.Permits, a.Capacity, a.Member, a.PlaceTTL}}
}

// SemReleaseArgs are sem_release.lua's: release, or (Receipt) the final
// release, which leaves its receipt in the dead set (receipt in
// lib_queue.lua).
type SemReleaseArgs struct {
	Token string `lua:"ARGV[1]"`
	Left  int    `lua:"ARGV[2]"`
	Wake  WakeTo `lua:"ARGV[3],ARGV[4]"`
	// Receipt adds the dead set (a last key) and the receipt's TTL.
	Receipt    bool  `lua:"variant"`
	ReceiptTTL int64 `lua:"ARGV[5]"` // ms
}

// Call is sem_release.lua's call on k.
func (a SemReleaseArgs) Call(k *Keys) Call {
	n := 4
	if a.Receipt {
		n = 5
	}
	args := make([]any, 4, n)
	args[0], args[1], args[2], args[3] = a.Token, a.Left, a.Wake.BaseArg, a.Wake.PublishArg
	keys := []string{k.Lock, k.Leases, k.Permits, k.Queue, k.Alive}
	if a.Receipt {
		keys = append(keys, k.Dead)
		args = append(args, a.ReceiptTTL)
	}
	return Call{S: SemReleaseScript, Keys: keys, Args: args}
}

// SemLeaveArgs are sem_leave.lua's.
type SemLeaveArgs struct {
	Member string `lua:"ARGV[1]"`
	Wake   WakeTo `lua:"ARGV[2],ARGV[3]"`
}

// Call is sem_leave.lua's call on k.
func (a SemLeaveArgs) Call(k *Keys) Call {
	return Call{S: SemLeaveScript, Keys: []string{k.Lock, k.Leases, k.Permits, k.Queue, k.Alive},
		Args: []any{a.Member, a.Wake.BaseArg, a.Wake.PublishArg}}
}

// SemRenewArgs are sem_renew.lua's.
type SemRenewArgs struct {
	Token string `lua:"ARGV[1]"`
	TTL   int64  `lua:"ARGV[2]"` // ms
	Exact bool   `lua:"ARGV[3]"`
	Seq   int64  `lua:"ARGV[4]"`
}

// Call is sem_renew.lua's call on k.
func (a SemRenewArgs) Call(k *Keys) Call {
	return Call{S: SemRenewScript, Keys: []string{k.Lock, k.Leases, k.Permits}, Args: []any{a.Token, a.TTL, Flag(a.Exact), a.Seq}}
}

// SemTTLArgs are sem_ttl.lua's.
type SemTTLArgs struct {
	Token string `lua:"ARGV[1]"`
}

// Call is sem_ttl.lua's call on k.
func (a SemTTLArgs) Call(k *Keys) Call {
	return Call{S: SemTTLScript, Keys: []string{k.Lock, k.Leases}, Args: []any{a.Token}}
}

// SemPermitsArgs are sem_permits.lua's: read or set the capacity.
type SemPermitsArgs struct {
	Capacity int    `lua:"ARGV[1]"` // if it has none yet
	Set      int    `lua:"ARGV[2]"` // the new capacity, or 0
	Wake     WakeTo `lua:"ARGV[3],ARGV[4]"`
}

// Call is sem_permits.lua's call on k.
func (a SemPermitsArgs) Call(k *Keys) Call {
	return Call{S: SemPermitsScript, Keys: []string{k.Lock, k.Leases, k.Permits, k.Queue, k.Alive},
		Args: []any{a.Capacity, a.Set, a.Wake.BaseArg, a.Wake.PublishArg}}
}

// SemForceArgs are sem_force.lua's: ForceUnlock of a Semaphore.
type SemForceArgs struct {
	Wake       WakeTo `lua:"ARGV[1],ARGV[2]"`
	ID         string `lua:"ARGV[3]"`
	ReceiptTTL int64  `lua:"ARGV[4]"` // ms
}

// Call is sem_force.lua's call on k.
func (a SemForceArgs) Call(k *Keys) Call {
	return Call{S: SemForceScript, Keys: []string{k.Lock, k.Leases, k.Permits, k.Queue, k.Alive, k.Dead},
		Args: []any{a.Wake.BaseArg, a.Wake.PublishArg, a.ID, a.ReceiptTTL}}
}

// LatchKeys are the keys of latch_set.lua and latch_down.lua: the count
// (the lock's key), the current phase's calls and the last phase's.
func LatchKeys(k *Keys) []string {
	return []string{k.Lock, k.Calls, k.CallsPrev}
}

// LatchSetArgs are latch_set.lua's: TrySetCount.
type LatchSetArgs struct {
	Count int64  `lua:"ARGV[1]"`
	TTL   int64  `lua:"ARGV[2]"` // ms
	ID    string `lua:"ARGV[3]"`
}

// Call is latch_set.lua's call on keys (LatchKeys).
func (a LatchSetArgs) Call(keys []string) Call {
	return Call{S: LatchSetScript, Keys: keys, Args: []any{a.Count, a.TTL, a.ID}}
}

// LatchDownArgs are latch_down.lua's: one attempt of a count-down.
type LatchDownArgs struct {
	ID      string `lua:"ARGV[1]"`
	Phase   string `lua:"ARGV[2]"`
	Once    string `lua:"ARGV[3]"`
	Channel string `lua:"ARGV[4]"`
	Publish string `lua:"ARGV[5]"`
}

// Call is latch_down.lua's call on keys (LatchKeys).
func (a LatchDownArgs) Call(keys []string) Call {
	return Call{S: LatchDownScript, Keys: keys, Args: []any{a.ID, a.Phase, a.Once, a.Channel, a.Publish}}
}

// LatchOpenArgs are latch_open.lua's: ForceUnlock of a Latch.
type LatchOpenArgs struct {
	Channel    string `lua:"ARGV[1]"`
	Publish    string `lua:"ARGV[2]"`
	ID         string `lua:"ARGV[3]"`
	ReceiptTTL int64  `lua:"ARGV[4]"` // ms
}

// Call is latch_open.lua's call on k.
func (a LatchOpenArgs) Call(k *Keys) Call {
	return Call{S: LatchOpenScript, Keys: []string{k.Lock, k.IDs, k.Dead}, Args: []any{a.Channel, a.Publish, a.ID, a.ReceiptTTL}}
}

// LockAllArgs are lock_all.lua's: every mutex of a set, or none.
type LockAllArgs struct {
	Token    string  `lua:"ARGV[1]"`
	Member   string  `lua:"ARGV[2]"`
	PlaceTTL int64   `lua:"ARGV[3]"` // ms
	Wake     WakeTo  `lua:"ARGV[4],ARGV[5]"`
	TTLs     []int64 `lua:"ARGV[i+5]"` // each mutex's lease, ms
}

// Call is lock_all.lua's call on ks, the mutexes' keys (as many as TTLs).
func (a LockAllArgs) Call(ks []*Keys) Call {
	keys := make([]string, 0, 5*len(ks))
	for _, k := range ks {
		keys = append(keys, k.Lock, k.Fence, k.Queue, k.Alive, k.Dead)
	}
	args := make([]any, 0, 5+len(a.TTLs))
	args = append(args, a.Token, a.Member, a.PlaceTTL, a.Wake.BaseArg, a.Wake.PublishArg)
	for _, t := range a.TTLs {
		args = append(args, t)
	}
	return Call{S: LockAllScript, Keys: keys, Args: args}
}

// BuryArgs are bury.lua's: refuse a token's late attempts.
type BuryArgs struct {
	Token string `lua:"ARGV[1]"`
	For   int64  `lua:"ARGV[2]"` // ms
}

// Call is bury.lua's call on k.
func (a BuryArgs) Call(k *Keys) Call {
	return Call{S: BuryScript, Keys: []string{k.Dead}, Args: []any{a.Token, a.For}}
}

// QuorumFenceArgs are quorum_fence.lua's: raise a node's fence counter.
type QuorumFenceArgs struct {
	Fence int64 `lua:"ARGV[1]"`
	Mark  bool  `lua:"ARGV[2]"`
}

// Call is quorum_fence.lua's call on k's fence counter and the node's
// mark.
func (a QuorumFenceArgs) Call(k *Keys, mark string) Call {
	return Call{S: QuorumFenceScript, Keys: []string{k.Fence, mark}, Args: []any{a.Fence, Flag(a.Mark)}}
}

// OwnerArgs are owner.lua's: a Client's record written, or deleted.
type OwnerArgs struct {
	TTL    int64 `lua:"ARGV[1]"`   // ms; 0 deletes
	Fields []any `lua:"ARGV[2..]"` // field, value, ...
}

// Call is owner.lua's call on the record's key.
func (a OwnerArgs) Call(key string) Call {
	args := make([]any, 0, 1+len(a.Fields))
	args = append(append(args, a.TTL), a.Fields...)
	return Call{S: OwnerScript, Keys: []string{key}, Args: args}
}

// LabelArgs are label.lua's: a hold's label recorded (WithLabel).
type LabelArgs struct {
	Token string `lua:"ARGV[1]"`
	Label string `lua:"ARGV[2]"`
}

// Call is label.lua's call on k's lock (its hash: a Semaphore's holders).
func (a LabelArgs) Call(k *Keys) Call {
	return Call{S: LabelScript, Keys: []string{k.Lock}, Args: []any{a.Token, a.Label}}
}
