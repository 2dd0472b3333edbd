package backend

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/goredis"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A batch of mutex renewals off a cluster goes to the server as one
// script call per renewFold renewals, not one per renewal (issue 47: the
// renewals of 100 000 leases at a 3 s TTL are 100 000 scripts a second,
// two thirds of each the price of the call itself), and each renewal
// still answers as renew.lua alone would, in its own place of the batch:
// renewed, not held (another owner's token), STALE (a later command of
// its hold ran first).
func TestRenewalsFoldedOffCluster(t *testing.T) {
	ctx := context.Background()
	s := redistest.StartT(t, redistest.Options{})
	rdb := s.Client()
	defer rdb.Close()
	d := goredis.New(rdb)
	w := protocol.WakeTo{Base: "dlock:wake:", Publish: "PUBLISH", BaseArg: "dlock:wake:", PublishArg: "PUBLISH"}
	const n = 2*renewFold + 50
	keys := make([]*protocol.Keys, n)
	for i := range keys {
		keys[i] = protocol.NewKeys("dlock", protocol.MutexKind, fmt.Sprintf("fold-%d", i))
		keys[i].Wake, keys[i].Hint = &w, new(atomic.Int64)
		r, err := protocol.LockArgs{Token: fmt.Sprint("t", i), TTL: 30000, Wake: w}.Acquire(keys[i]).Run(ctx, d).Int64Slice()
		if err != nil || r[0] != protocol.ReplyHeld {
			t.Fatalf("lock %d: %v, %v", i, r, err)
		}
	}
	// the first hold's place is 5 (an Extend ran): a renewal with place 3 is stale
	if v, err := (protocol.RenewArgs{Token: "t0", TTL: 30000, Exact: true, Seq: 5}).Call(keys[0]).Run(ctx, d).Int64(); err != nil || v != 1 {
		t.Fatalf("the first hold's Extend: %v, %v", v, err)
	}
	be := NewSingle(d, false, ReplicaSync{})
	ops := make([]Op, n)
	for i, k := range keys {
		token := fmt.Sprint("t", i)
		if i == 1 {
			token = "another" // not the owner
		}
		ops[i] = protocol.RenewArgs{Token: token, TTL: 60000, Seq: 3}.Call(k)
	}
	be.Batch(ctx, ops[:1], true) // renew.lua loaded: the count below is of EVALSHA only
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	out := be.Batch(ctx, ops, true)
	for i, r := range out {
		want := int64(1)
		switch i {
		case 0:
			want = protocol.ReplyStale
		case 1:
			want = 0
		}
		if v, err := r.Int64(); err != nil || v != want {
			t.Fatalf("renewal %d answered %v, %v; want %d", i, v, err, want)
		}
	}
	if ms := rdb.PTTL(ctx, keys[n-1].Lock).Val().Milliseconds(); ms <= 30000 {
		t.Fatalf("the last hold's TTL is %d ms after its renewal to 60 000", ms)
	}
	if calls := scriptCalls(t, rdb); calls != (n+renewFold-1)/renewFold {
		t.Fatalf("%d renewals took %d script calls; want %d", n, calls, (n+renewFold-1)/renewFold)
	}
}

// scriptCalls is how many scripts the server ran (EVALSHA and EVAL).
func scriptCalls(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if ok && (name == "cmdstat_evalsha" || name == "cmdstat_eval") {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			calls += n
		}
	}
	return calls
}

// A proxy that shards the keys without the cluster protocol (docs/deployments.md)
// refuses a script whose keys are in different slots (CROSSSLOT): the
// renewals of such a folded call are sent again one by one, and none is
// folded from then on.
func TestRenewalsUnfoldedAfterCrossSlot(t *testing.T) {
	ctx := context.Background()
	s := redistest.StartT(t, redistest.Options{})
	rdb := s.Client()
	defer rdb.Close()
	d := &crossSlotDriver{Driver: goredis.New(rdb)}
	w := protocol.WakeTo{Base: "dlock:wake:", Publish: "PUBLISH", BaseArg: "dlock:wake:", PublishArg: "PUBLISH"}
	const n = 5
	var ops []Op
	for i := range n {
		k := protocol.NewKeys("dlock", protocol.MutexKind, fmt.Sprintf("shard-%d", i))
		k.Wake, k.Hint = &w, new(atomic.Int64)
		r, err := protocol.LockArgs{Token: fmt.Sprint("t", i), TTL: 30000, Wake: w}.Acquire(k).Run(ctx, d).Int64Slice()
		if err != nil || r[0] != protocol.ReplyHeld {
			t.Fatalf("lock %d: %v, %v", i, r, err)
		}
		ops = append(ops, protocol.RenewArgs{Token: fmt.Sprint("t", i), TTL: 60000, Seq: 3}.Call(k))
	}
	be := NewSingle(d, false, ReplicaSync{})
	for round := range 2 {
		d.refused.Store(0)
		for i, r := range be.Batch(ctx, ops, true) {
			if v, err := r.Int64(); err != nil || v != 1 {
				t.Fatalf("round %d: renewal %d answered %v, %v; want 1", round, i, v, err)
			}
		}
		if want := int64(1 - round); d.refused.Load() != want {
			t.Fatalf("round %d: %d folded calls refused; want %d", round, d.refused.Load(), want)
		}
	}
}

// crossSlotDriver refuses every command of more than one key, as a
// proxy that shards them does.
type crossSlotDriver struct {
	driver.Driver
	refused atomic.Int64
}

func (d *crossSlotDriver) Pipeline(ctx context.Context, cmds []driver.Command) []driver.Reply {
	out := make([]driver.Reply, len(cmds))
	var pass []driver.Command
	var at []int
	for i, c := range cmds {
		if c.Keys > 1 {
			d.refused.Add(1)
			out[i] = driver.Reply{Err: errors.New("CROSSSLOT Keys in request don't hash to the same slot")}
			continue
		}
		pass, at = append(pass, c), append(at, i)
	}
	if len(pass) > 0 {
		for j, r := range d.Driver.Pipeline(ctx, pass) {
			out[at[j]] = r
		}
	}
	return out
}
