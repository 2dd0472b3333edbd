package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// Rendering from fixed inputs: no Redis.

var (
	t0    = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	alice = &dlock.Owner{Client: "0123456789abcdef", Host: "web-1", PID: 4242, Program: "api", Label: "billing"}
)

// fixedLocks is a scene of one lock of each kind, as seen at t0.
func fixedLocks(mutexFence, rwFence int64) []*dlock.LockInfo {
	return []*dlock.LockInfo{
		{Kind: dlock.KindLatch, Name: "boot", Held: true, Count: 3, TTL: time.Minute},
		{Kind: dlock.KindMutex, Name: "orders/42", Held: true, TTL: 20 * time.Second, Fence: mutexFence,
			Holders: []dlock.Holder{{Token: "0123456789abcdef00000000000000aa", Holds: 1, Fence: mutexFence,
				Since: t0.Add(-1500 * time.Millisecond), TTL: 20 * time.Second, Owner: alice}}},
		{Kind: dlock.KindRWMutex, Name: "config", Held: true, Mode: "read", Fence: rwFence, TTL: 10 * time.Second,
			Holders: []dlock.Holder{
				{Token: "fedcba9876543210fedcba9876543210", Side: "read", Holds: 1, Fence: rwFence - 1, Since: t0.Add(-time.Minute)},
				{Token: "0123456789abcdef00000000000000bb", Side: "read", Holds: 1, Fence: rwFence, Label: "export", Since: t0.Add(-2 * time.Second), Owner: alice}},
			Waiters: []dlock.Waiter{{Token: "w1", Side: "write"}, {Token: "w2", Side: "read"}}},
		{Kind: dlock.KindMutex, Name: "idle", Fence: 7},
		{Kind: dlock.KindSemaphore, Name: "pool", Capacity: 5, Free: 5, Fence: 3,
			Waiters: []dlock.Waiter{{Token: "w3", Permits: 2}}},
	}
}

// TestRenderTop renders two refreshes two seconds apart: orders/42 has a
// new holder (0.5/s), config two (1/s); the rest none. Rows are busiest
// first; the latch has no rate; the first frame has none at all.
func TestRenderTop(t *testing.T) {
	v := topView{prefix: "dlock", pattern: "*", interval: time.Second}
	prev := &snapshot{at: t0.Add(-2 * time.Second), locks: fixedLocks(100, 40)}
	cur := &snapshot{at: t0, locks: fixedLocks(120, 44)}
	want := `dlock top  03:04:05  prefix "dlock", locks matching "*", every 1s  (Ctrl-C quits)
5 locks, 3 held, 3 waiters, 1.5 acquisitions/s

KIND       NAME       HOLDER                HELD FOR  WAITERS  ACQ/S  LOST/S
rwmutex    config     fedcba987654… +1      1m0s      2        1.0    –
mutex      orders/42  web-1/4242 (billing)  1.5s      0        0.5    –
semaphore  pool       -                     -         1        0.0    –
latch      boot       count 3               -         0        –      –
mutex      idle       -                     -         0        0.0    –

ACQ/S: holds seen to begin per second since the last refresh (one that began and ended between two refreshes is not seen).
` + lostNote + "\n"
	if got := renderTop(v, prev, cur); got != want {
		t.Errorf("frame:\n%s\nwant:\n%s", got, want)
	}

	first := renderTop(topView{prefix: "dlock", interval: time.Second, limit: 2}, nil, cur)
	for _, w := range []string{"all locks", "5 locks, 3 held, 3 waiters\n", "… and 3 more (--limit)"} {
		if !strings.Contains(first, w) {
			t.Errorf("first frame lacks %q:\n%s", w, first)
		}
	}
	// Without rates, the most waiters come first, then the longest hold.
	if rows := topRows(nil, cur); rows[0].l.Name != "config" || rows[1].l.Name != "pool" || rows[2].l.Name != "orders/42" || rows[0].hasRate {
		t.Errorf("first frame's order: %s, %s, %s", rows[0].l.Name, rows[1].l.Name, rows[2].l.Name)
	}
	if strings.Contains(first, "acquisitions/s") || strings.Count(first, "–") < 2*2 {
		t.Errorf("the first frame shows rates:\n%s", first)
	}

	failed := renderTop(v, prev, &snapshot{at: t0, err: dlock.ErrClosed})
	if !strings.Contains(failed, "refresh failed: "+dlock.ErrClosed.Error()) {
		t.Errorf("a failed refresh:\n%s", failed)
	}
}

// TestTopRates: a hold counts as begun when its fence is new to its lock
// since the last refresh; a lock new since then counts all its holds.
func TestTopRates(t *testing.T) {
	held := func(kd dlock.Kind, name string, fences ...int64) *dlock.LockInfo {
		l := &dlock.LockInfo{Kind: kd, Name: name}
		for _, f := range fences {
			l.Holders = append(l.Holders, dlock.Holder{Token: fmt.Sprint("t", f), Fence: f})
		}
		return l
	}
	prev := &snapshot{at: t0.Add(-time.Second), locks: []*dlock.LockInfo{
		held(dlock.KindMutex, "same", 50), held(dlock.KindRWMutex, "more", 7, 8)}}
	cur := &snapshot{at: t0, locks: []*dlock.LockInfo{
		held(dlock.KindMutex, "same", 50), held(dlock.KindRWMutex, "more", 8, 9, 12),
		held(dlock.KindSemaphore, "new", 3, 4, 5)}}
	rates := map[string]float64{}
	for _, r := range topRows(prev, cur) {
		if !r.hasRate {
			t.Errorf("%s: no rate", r.l.Name)
		}
		rates[r.l.Name] = r.rate
	}
	if rates["same"] != 0 || rates["more"] != 2 || rates["new"] != 3 {
		t.Errorf("rates %v; want same 0, more 2, new 3", rates)
	}
}

// TestWriteList renders ls's table.
func TestWriteList(t *testing.T) {
	var b strings.Builder
	writeList(&b, fixedLocks(9, 4), "dlock", "")
	want := `KIND       NAME       HELD  HOLDERS               WAITERS  TTL     FENCE  STATE
latch      boot       yes   -                     0        1m0s    0      count 3
mutex      orders/42  yes   web-1/4242 (billing)  0        20s     9      -
rwmutex    config     yes   fedcba987654… +1      2        10s     4      read
mutex      idle       no    -                     0        no key  7      -
semaphore  pool       no    -                     1        no key  3      5/5 free
5 locks
`
	if b.String() != want {
		t.Errorf("ls:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	writeList(&b, nil, "p", "a/*")
	if b.String() != "no locks under prefix \"p\" matching \"a/*\"\n" {
		t.Errorf("empty ls: %q", b.String())
	}
}

// TestWriteLock renders inspect's report of an RWMutex: a reader whose
// Client recorded nothing shows dashes.
func TestWriteLock(t *testing.T) {
	var b strings.Builder
	l := fixedLocks(1, 4)[2]
	l.Key = "dlock:{config}:rw"
	writeLock(&b, l, t0)
	want := `rwmutex "config" (key dlock:{config}:rw)
  held:      yes, by 2 holders
  mode:      read
  ttl:       10s
  fence:     4, the highest its holders have
  holders:
    TOKEN                             SIDE  HOLDS  FENCE  LABEL   HELD FOR  TTL  HOST   PID   PROGRAM  CLIENT LABEL
    fedcba9876543210fedcba9876543210  read  1      3      -       1m0s      0s   -      -     -        -
    0123456789abcdef00000000000000bb  read  1      4      export  2s        0s   web-1  4242  api      billing
  waiters:   2, in the order they will be served:
    #  TOKEN  SIDE   WAITING  EXPIRES  HOST  PID  PROGRAM  CLIENT LABEL
    1  w1     write  -        0s       -     -    -        -
    2  w2     read   -        0s       -     -    -        -
`
	if b.String() != want {
		t.Errorf("inspect:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestJSONValues: durations in milliseconds with -1 kept, times in UTC.
func TestJSONValues(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{{0, 0}, {-1, -1}, {-5 * time.Millisecond, 0}, {time.Microsecond, 1}, {1500 * time.Millisecond, 1500}} {
		if got := msJSON(tc.d); got != tc.want {
			t.Errorf("msJSON(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
	at := time.Date(2030, 1, 2, 4, 4, 5, 7e6, time.FixedZone("CET", 3600))
	if s := timeJSON(at); s == nil || *s != "2030-01-02T03:04:05.007Z" {
		t.Errorf("timeJSON = %v", s)
	}
	if timeJSON(time.Time{}) != nil {
		t.Error("the zero time is not null")
	}
	j := toJSON(fixedLocks(1, 4))
	if len(j) != 5 || j[1].Holders[0].Owner.Label != "billing" || j[2].Holders[0].Owner != nil || j[0].Holders == nil || j[0].Waiters == nil {
		t.Errorf("toJSON: %+v", j)
	}
}

// fixedElection is an election led by alice with value "10.0.0.1:5432",
// term 12, won 3 s before t0, with a candidate waiting.
func fixedElection() *dlock.LockInfo {
	return &dlock.LockInfo{Kind: dlock.KindElection, Name: "primary", Key: "dlock:{primary}:election", Held: true,
		TTL: 27 * time.Second, Fence: 12, Value: "10.0.0.1:5432",
		Holders: []dlock.Holder{{Token: "0123456789abcdef00000000000000cc", Holds: 1, Fence: 12,
			Since: t0.Add(-3 * time.Second), TTL: 27 * time.Second, Owner: alice}},
		Waiters: []dlock.Waiter{{Token: "w4", Since: t0.Add(-time.Second), Expires: 2 * time.Second}}}
}

// TestRenderElection renders an election in inspect, ls, top and unlock
// --force: its leader's value is shown, quoted, and cut short in tables.
func TestRenderElection(t *testing.T) {
	var b strings.Builder
	writeLock(&b, fixedElection(), t0)
	for _, w := range []string{`election "primary" (key dlock:{primary}:election)`, "held:      yes, by 1 holder\n",
		`leader:    value "10.0.0.1:5432", term 12`, "waiters:   1, in the order"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("inspect lacks %q:\n%s", w, b.String())
		}
	}
	b.Reset()
	writeLock(&b, &dlock.LockInfo{Kind: dlock.KindElection, Name: "primary", Fence: 12}, t0)
	if !strings.Contains(b.String(), "leader:    none\n") {
		t.Errorf("inspect of an election nobody leads:\n%s", b.String())
	}

	long := fixedElection()
	long.Value = strings.Repeat("x", 40)
	b.Reset()
	writeList(&b, []*dlock.LockInfo{fixedElection(), long, {Kind: dlock.KindElection, Name: "idle", Fence: 3}}, "dlock", "")
	want := `KIND      NAME     HELD  HOLDERS               WAITERS  TTL     FENCE  STATE
election  primary  yes   web-1/4242 (billing)  1        27s     12     value "10.0.0.1:5432"
election  primary  yes   web-1/4242 (billing)  1        27s     12     value "` + strings.Repeat("x", 31) + `…"
election  idle     no    -                     0        no key  3      no leader
3 locks
`
	if b.String() != want {
		t.Errorf("ls:\n%s\nwant:\n%s", b.String(), want)
	}

	frame := renderTop(topView{prefix: "dlock", interval: time.Second}, nil, &snapshot{at: t0, locks: []*dlock.LockInfo{fixedElection()}})
	if !strings.Contains(frame, `election  primary  web-1/4242 (billing) "10.0.0.1:5432"  3s`) {
		t.Errorf("top:\n%s", frame)
	}

	b.Reset()
	writeFreed(&b, fixedElection(), t0)
	for _, w := range []string{`freed election "primary" (key dlock:{primary}:election), which had 27s left`,
		`its leader's value was "10.0.0.1:5432"; observers are told nobody leads`, "1 waiter: the next gets it"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("unlock --force lacks %q:\n%s", w, b.String())
		}
	}
	if j := toJSON([]*dlock.LockInfo{fixedElection()}); j[0].Kind != "election" || j[0].Value != "10.0.0.1:5432" || j[0].Fence != 12 {
		t.Errorf("toJSON: %+v", j[0])
	}
}

// TestRenderLeader renders dlock leader's report, its --watch lines and
// its JSON, with a leader and without.
func TestRenderLeader(t *testing.T) {
	led := dlock.LeaderInfo{Value: "10.0.0.1:5432", Term: 12, Since: t0.Add(-3 * time.Second), TTL: 27 * time.Second, Owner: alice}
	want := `leader of election "primary": "10.0.0.1:5432"
  term:   12
  since:  2030-01-02T03:04:02.000Z (3s ago)
  ttl:    27s
  owner:  host web-1, pid 4242, program api, label billing (client 0123456789abcdef)
`
	if got := leaderReport("primary", "dlock", led, t0); got != want {
		t.Errorf("leader:\n%s\nwant:\n%s", got, want)
	}
	if got := leaderReport("primary", "dlock", dlock.LeaderInfo{}, t0); got != "no leader in election \"primary\" (prefix \"dlock\")\n" {
		t.Errorf("no leader: %q", got)
	}
	anon := led
	anon.Owner = nil
	if got := leaderReport("primary", "dlock", anon, t0); !strings.Contains(got, "owner:  not recorded\n") {
		t.Errorf("leader without owner:\n%s", got)
	}
	for _, tc := range []struct {
		info dlock.LeaderInfo
		want string
	}{
		{led, "2030-01-02T03:04:05.000Z  leader \"10.0.0.1:5432\"  term 12  web-1/4242 (billing)  ttl 27s\n"},
		{anon, "2030-01-02T03:04:05.000Z  leader \"10.0.0.1:5432\"  term 12  owner not recorded  ttl 27s\n"},
		{dlock.LeaderInfo{}, "2030-01-02T03:04:05.000Z  no leader\n"},
	} {
		if got := leaderLine(tc.info, t0); got != tc.want {
			t.Errorf("watch line %q, want %q", got, tc.want)
		}
	}
	j := leaderOf("primary", led, t0)
	if !j.Leader || j.Value != led.Value || j.Term != 12 || j.TTLMs != 27000 || j.Since == nil ||
		*j.Since != "2030-01-02T03:04:02.000Z" || j.Owner == nil || j.Owner.PID != 4242 || j.At != "2030-01-02T03:04:05.000Z" {
		t.Errorf("JSON of a leader: %+v", j)
	}
	// A state without a leader has nothing of a leader, whatever it holds.
	if j := leaderOf("primary", dlock.LeaderInfo{Value: "stale", TTL: time.Second}, t0); j.Leader || j.Value != "" ||
		j.TTLMs != 0 || j.Since != nil || j.Owner != nil || j.Name != "primary" {
		t.Errorf("JSON of no leader: %+v", j)
	}
}
