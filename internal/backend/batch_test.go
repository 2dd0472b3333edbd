package backend

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/goredis"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/redistest"
)

// A batch of fast scripts' calls after SCRIPT FLUSH, one of them on a
// held lock: each call goes through its rounds (NOSCRIPT, sent whole;
// slow, its full script; NOSCRIPT again, whole) and answers as its full
// script alone would, in its own place of the batch; the other is
// granted at once.
func TestBatchOfFastCallsAfterAFlush(t *testing.T) {
	ctx := context.Background()
	s := redistest.StartT(t, redistest.Options{})
	rdb := s.Client()
	defer rdb.Close()
	d := &roundsDriver{Driver: goredis.New(rdb)}
	w := protocol.WakeTo{Base: "dlock:wake:", Publish: "PUBLISH", BaseArg: "dlock:wake:", PublishArg: "PUBLISH"}
	keys := func(name string) *protocol.Keys {
		k := protocol.NewKeys("dlock", protocol.MutexKind, name)
		k.Wake, k.Hint = &w, new(atomic.Int64)
		return k
	}
	lock := func(k *protocol.Keys, token string) protocol.Call {
		return protocol.LockArgs{Token: token, TTL: 30000, Wake: w}.Acquire(k)
	}
	held, free := keys("held"), keys("free")
	if r, err := lock(held, "a").Run(ctx, d).Int64Slice(); err != nil || r[0] != protocol.ReplyHeld {
		t.Fatalf("the first holder's lock: %v, %v", r, err)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	d.rounds = 0
	out := RunBatch(ctx, d, []protocol.Call{lock(held, "b"), lock(free, "c")}, ReplicaSync{})
	busy, err := out[0].Int64Slice()
	if err != nil || busy[0] != protocol.ReplyBusy || busy[1] <= 0 {
		t.Fatalf("the held lock's call: %v, %v; want {0, wait} (lock.lua's busy)", busy, err)
	}
	got, err := out[1].Int64Slice()
	if err != nil || got[0] != protocol.ReplyHeld {
		t.Fatalf("the free lock's call: %v, %v; want {1, fence}", got, err)
	}
	// lock_fast.lua by its SHA (NOSCRIPT), whole (slow for "held"), then
	// lock.lua by its SHA (NOSCRIPT), whole
	if d.rounds != 4 {
		t.Fatalf("the batch took %d round trips; want 4", d.rounds)
	}
	if !held.Contended() || free.Contended() {
		t.Fatalf("contended: held %v, free %v; want true, false", held.Contended(), free.Contended())
	}
}

// roundsDriver counts the pipelines sent.
type roundsDriver struct {
	driver.Driver
	rounds int
}

func (d *roundsDriver) Pipeline(ctx context.Context, cmds []driver.Command) []driver.Reply {
	d.rounds++
	return d.Driver.Pipeline(ctx, cmds)
}
