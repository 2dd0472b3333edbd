package redistest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestNetDropsAndDeliversLate: a command sent while the server's requests
// are dropped is not run; once healed, TCP delivers it, late, and the
// server runs it — with nobody waiting for the reply.
func TestNetDropsAndDeliversLate(t *testing.T) {
	n := NewNet(t)
	s := n.Start(t, Options{})
	admin := s.Client()
	defer admin.Close()
	ctx := context.Background()
	if err := admin.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	c := s.Client(func(o *redis.Options) { o.MaxRetries, o.ContextTimeoutEnabled = -1, true })
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil { // the connection is made before the drop
		t.Fatal(err)
	}
	if err := n.DropRequests(s.Port()); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := c.Set(short, "late", "1", 0).Err()
	cancel()
	if err == nil {
		t.Fatal("SET answered while its packets were dropped")
	}
	if err := n.Heal(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	// The SET is in the client's socket; TCP retransmits it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, err := admin.Get(ctx, "late").Result()
		if err == nil && v == "1" {
			t.Logf("SET delivered %v after Heal", time.Since(t0))
			break
		}
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the dropped SET was never delivered after Heal")
		}
		if false {
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Replies dropped: the server runs the command, the client hears
	// nothing (on a connection made before: a new one's handshake would be
	// dropped too).
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := n.DropReplies(s.Port()); err != nil {
		t.Fatal(err)
	}
	short, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	err = c.Incr(short, "ran").Err()
	cancel()
	if err == nil {
		t.Fatal("INCR answered while its replies were dropped")
	}
	if err := n.Heal(); err != nil {
		t.Fatal(err)
	}
	if v, err := admin.Get(ctx, "ran").Int(); err != nil || v != 1 {
		t.Fatalf("INCR whose reply was lost: counter %d, %v; want 1", v, err)
	}
}
