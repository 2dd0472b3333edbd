package web

import (
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
)

// threeCycle is a snapshot of three services in a deadlock: billing holds
// accounts and waits for ledger, ledger's holder (audit) waits for
// invoices, invoices' holder (export) waits for accounts. export began
// waiting last: it is the victim. A fourth wait, unrelated, waits on a
// lock held by nobody it knows.
func threeCycle(at time.Time) *dlock.Snapshot {
	tok := func(i int) string { return fmt.Sprintf("%016x%016x", 0xabc0+i, i) }
	names := []string{"accounts", "ledger", "invoices"}
	who := []string{"billing", "audit", "export"}
	s := &dlock.Snapshot{At: at, Keys: 42}
	var waits []dlock.Wait
	for i, n := range names {
		holder := dlock.Holder{Token: tok(i), Holds: 1, Fence: int64(10 + i), Since: at.Add(-time.Duration(5-i) * time.Second),
			TTL: 9 * time.Second, Label: who[i], Owner: &dlock.Owner{Client: tok(i)[:16], Host: "host-" + who[i], PID: 100 + i, Program: who[i] + "d"}}
		next := names[(i+1)%len(names)]
		s.Locks = append(s.Locks, &dlock.LockInfo{Kind: dlock.KindMutex, Name: n, Held: true, TTL: 9 * time.Second, Fence: holder.Fence,
			Holders: []dlock.Holder{holder}})
		waits = append(waits, dlock.Wait{Token: tok(10 + i), Since: at.Add(-time.Duration(3-i) * time.Second),
			For:   []dlock.LockRef{{Kind: dlock.KindMutex, Name: next}},
			Holds: []dlock.HeldLock{{LockRef: dlock.LockRef{Kind: dlock.KindMutex, Name: n}, Token: tok(i)}},
			Label: who[i], Owner: holder.Owner})
	}
	// each lock is waited for by the wait of the one before it
	for i := range s.Locks {
		prev := waits[(i+len(waits)-1)%len(waits)]
		s.Locks[i].Waiters = []dlock.Waiter{{Token: prev.Token, Since: prev.Since, Expires: 5 * time.Second, Owner: prev.Owner}}
	}
	s.Waits = append(waits, dlock.Wait{Token: tok(20), Since: at.Add(-time.Second), Label: "report",
		For:   []dlock.LockRef{{Kind: dlock.KindRWMutex, Name: "catalog", Side: "read"}},
		Holds: []dlock.HeldLock{{LockRef: dlock.LockRef{Kind: dlock.KindSemaphore, Name: "slots"}, Token: tok(21)}}})
	s.Deadlocks = []dlock.Deadlock{{Waits: waits, Victim: waits[2].Token, At: at}}
	s.Broken = []dlock.Deadlock{{Waits: waits[:2], Victim: waits[1].Token, At: at.Add(-10 * time.Minute)}}
	return s
}
