package backend

import (
	"context"
	"errors"
	"testing"

	"github.com/dlock-go/dlock/internal/protocol"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/goredis"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func TestPickCAS(t *testing.T) {
	tests := []struct {
		known map[string]bool
		want  casMode
	}{
		{map[string]bool{}, casWatch},
		{map[string]bool{"delex": true}, casDelex},
		{map[string]bool{"delifeq": true}, casDelifeq},
		{map[string]bool{"delex": true, "delifeq": true}, casDelex},
		{map[string]bool{"set": true}, casWatch},
	}
	for _, tt := range tests {
		if got := pickCAS(tt.known); got != tt.want {
			t.Errorf("pickCAS(%v) = %v, want %v", tt.known, got, tt.want)
		}
	}
}

func TestCASDetectionOnThisServer(t *testing.T) {
	s := redistest.StartT(t, redistest.Options{})
	rdb := s.Client()
	defer rdb.Close()
	var d casDetector
	// Redis 7 has neither DELEX nor DELIFEQ.
	if m := d.get(context.Background(), goredis.New(rdb)); m != casWatch {
		t.Fatalf("mode %v on Redis 7; want the WATCH path", m)
	}
}

// meddler is a Driver whose dedicated connections let another client
// write the watched key after WATCH (and the read) and before EXEC — a
// concurrent change.
type meddler struct {
	driver.Driver
	other   *redis.Client
	value   string
	meddles int // how many transactions to meddle with
}

func (m *meddler) Dedicated(ctx context.Context, key string, fn func(driver.Conn) error) error {
	return m.Driver.Dedicated(ctx, key, func(c driver.Conn) error { return fn(meddledConn{c, m, key}) })
}

type meddledConn struct {
	driver.Conn
	m   *meddler
	key string
}

func (c meddledConn) Pipeline(ctx context.Context, cmds []driver.Command) []driver.Reply {
	out := c.Conn.Pipeline(ctx, cmds)
	if cmds[0].Args[0] == "WATCH" && c.m.meddles > 0 {
		c.m.meddles--
		c.m.other.Set(ctx, c.key, c.m.value, 0)
	}
	return out
}

func TestCompareAndDoUnderConcurrentChange(t *testing.T) {
	ctx := context.Background()
	s := redistest.StartT(t, redistest.Options{})
	rdb, other := s.Client(), s.Client()
	defer rdb.Close()
	defer other.Close()
	d := goredis.New(rdb)

	// The key is rewritten with the same value between WATCH and EXEC: the
	// EXEC aborts, the compare runs again and then succeeds.
	rdb.Set(ctx, "k1", "mine", 0)
	m := &meddler{Driver: d, other: other, value: "mine", meddles: 1}
	if ok, err := compareAndDo(ctx, m, "k1", "mine", 0, protocol.Keyed("DEL", "k1")); !ok || err != nil {
		t.Fatalf("after a harmless concurrent write: %v, %v; want deleted", ok, err)
	}
	if m.meddles != 0 || rdb.Exists(ctx, "k1").Val() != 0 {
		t.Fatal("the meddling did not happen, or the key is still there")
	}

	// Another owner takes the key between WATCH and EXEC: nothing is done.
	rdb.Set(ctx, "k2", "mine", 0)
	m = &meddler{Driver: d, other: other, value: "theirs", meddles: 1}
	if ok, err := compareAndDo(ctx, m, "k2", "mine", 0, protocol.Keyed("DEL", "k2")); ok || err != nil {
		t.Fatalf("after another owner took the key: %v, %v; want not done", ok, err)
	}
	if v := rdb.Get(ctx, "k2").Val(); v != "theirs" {
		t.Fatalf("the other owner's key was touched: %q", v)
	}

	// A key that changes every time gives up with an error, not a loop.
	rdb.Set(ctx, "k3", "mine", 0)
	m = &meddler{Driver: d, other: other, value: "mine", meddles: 100}
	if ok, err := compareAndDo(ctx, m, "k3", "mine", 0, protocol.Keyed("DEL", "k3")); ok || err == nil {
		t.Fatalf("a key that never settles: %v, %v; want an error", ok, err)
	}
}

// A deployment that buries the tokens of acquires given up on must be able
// to run bury.lua: the script-free one cannot, and must not say it buries
// (an undo would fail on it and be made again in the background).
func TestBuryOnlyWhereScriptsRun(t *testing.T) {
	p := &plain{}
	if p.Caps().Bury {
		t.Fatal("the script-free backend says it buries tokens")
	}
	if err := p.Everywhere(context.Background(), protocol.Call{}); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("a script call on the script-free backend: %v, want ErrUnsupported", err)
	}
	if !(&single{}).Caps().Bury {
		t.Fatal("a deployment with scripts does not bury tokens")
	}
}
