package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// TestOldLayoutRefused: a rolling deploy, where a Client of a dlock from
// before the one-string hold (whose mutex hold is a hash: owner token ->
// count, 'f:<token>' -> fence, 't:<token>' -> when taken) holds a lock
// that a Client of this one asks for. The new Client must neither take
// the lock nor wait on it blindly: every acquire, re-entry-free release
// and renewal returns an error that names the cause; Inspect reads the
// old hold (who holds it, its fence) so an operator can see it; and once
// the old hold is gone the lock works.
func TestOldLayoutRefused(t *testing.T) {
	ctx := context.Background()
	admin := newRedis(t, srv)
	c := client(t)
	for _, kind := range []string{"Mutex", "FairMutex"} {
		t.Run(kind, func(t *testing.T) {
			name := lockName(t)
			key := keysOf(name).Lock
			if err := admin.HSet(ctx, key, "0ld", 1, "f:0ld", 41, "t:0ld", time.Now().UnixMilli()).Err(); err != nil {
				t.Fatal(err)
			}
			admin.PExpire(ctx, key, time.Minute)
			var m dlock.Locker = c.Mutex(name)
			if kind == "FairMutex" {
				m = c.FairMutex(name)
			}
			layout := func(what string, err error) {
				t.Helper()
				if err == nil || errors.Is(err, dlock.ErrNotObtained) || !strings.Contains(err.Error(), "another layout") {
					t.Fatalf("%s over an old layout's hold: %v; want the layout named", what, err)
				}
			}
			_, err := m.TryLock(ctx)
			layout("TryLock", err)
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err = m.Lock(wctx)
			cancel()
			layout("Lock", err)
			if fields := fieldsOf(t, admin, key); fields["0ld"] != "1" || len(fields) != 3 {
				t.Fatalf("the old hold after the refusals: %v", fields)
			}
			info, err := c.Inspect(ctx, dlock.KindMutex, name)
			if err != nil || !info.Held || len(info.Holders) != 1 || info.Holders[0].Token != "0ld" || info.Fence != 41 {
				t.Fatalf("Inspect of the old hold: %+v, %v", info, err)
			}
			admin.Del(ctx, key) // the old Client released it
			unlock(t, mustLock(t, m, ctx))
		})
	}
}
