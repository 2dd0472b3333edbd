package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// Locks of different kinds called alike are different locks: each kind
// has its own keys, so none is granted beside a holder of its own kind,
// none reads another kind's keys (no WRONGTYPE, no miscounted permits),
// and Mutex and FairMutex, one kind, exclude each other.
func TestKindsOnOneName(t *testing.T) {
	ctx := context.Background()
	a, b := client(t), client(t)
	family := map[string]string{"Mutex": "m", "FairMutex": "m", "RWMutex.RLock": "rw", "RWMutex.Lock": "rw", "Semaphore": "s"}
	for _, first := range allKinds {
		for _, second := range allKinds {
			t.Run(first.name+"/"+second.name, func(t *testing.T) {
				name := lockName(t)
				held, err := first.lock(a, name, ctx)
				if err != nil {
					t.Fatal(err)
				}
				l, err := second.try(b, name, ctx)
				shared := first.name == "RWMutex.RLock" && second.name == "RWMutex.RLock"
				switch {
				case family[first.name] == family[second.name] && !shared:
					if !errors.Is(err, dlock.ErrNotObtained) {
						t.Fatalf("granted beside a holder of the same lock: %v", err)
					}
				case err != nil:
					t.Fatalf("a lock of another kind (its own lock) was refused: %v", err)
				default:
					// Each sees only its own holder: the second's probe
					// is refused while it holds.
					if p, err := second.probe(a, name, ctx); !errors.Is(err, dlock.ErrNotObtained) {
						t.Fatalf("the second holder's own lock was free to another: %v %v", p, err)
					}
					unlock(t, l)
				}
				if held.Err() != nil {
					t.Fatalf("the first holder lost its lease: %v", held.Err())
				}
				unlock(t, held)
			})
		}
	}
	// A Latch called like a held Mutex is a latch of its own.
	name := lockName(t)
	held := mustLock(t, a.Mutex(name), ctx)
	if ok, err := b.Latch(name).TrySetCount(ctx, 2, time.Minute); !ok || err != nil {
		t.Fatalf("TrySetCount on a latch called like a held Mutex: %v %v", ok, err)
	}
	if n, err := b.Latch(name).CountDown(ctx); n != 1 || err != nil {
		t.Fatalf("CountDown: %d %v", n, err)
	}
	unlock(t, held)
}
