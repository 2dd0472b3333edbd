package dlock

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/acquisition"
	"github.com/dlock-go/dlock/internal/backend"

	"github.com/dlock-go/dlock/internal/goredis"
	"github.com/dlock-go/dlock/internal/kinds"
	"github.com/dlock-go/dlock/internal/protocol"
)

// The hand-off message lib_mutex.lua publishes is the one protocol.ParseHandOff
// reads, and the value a waiting attempt of lock.lua reports (seen) is the
// fence counter as it found it: a hand-off that comes after that attempt
// has a fence above it (acquisition.HandedOver honours it); an attempt after the
// hand-off — here, once the handed hold is gone — reports a counter at
// or above the hand-off's fence, so the message is refused (internal/acquisition/handoff.go).
func TestHandOffMessageAgrees(t *testing.T) {
	ctx := context.Background()
	c, rdb := serverClient(t)
	d := goredis.New(rdb)
	k := c.keys(protocol.MutexKind, "x")
	p := kinds.Mutex{K: k, W: k.Wake}
	const ttl, placeTTL = time.Minute, 60000
	attempt := func(token, member string) []int64 {
		t.Helper()
		res, err := backend.FenceReply("lock", "x", p.Lock(token, ttl, 0, member, true, placeTTL, false).Run(ctx, d), nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := attempt("a", ""); res[0] != protocol.ReplyHeld {
		t.Fatalf("a's attempt = %v; want held", res)
	}
	member := c.member("b", 0, ttl)
	busy := attempt("b", member)
	if len(busy) != 3 || busy[0] != protocol.ReplyBusy {
		t.Fatalf("b's attempt = %v; want {busy, wait, seen}", busy)
	}
	b := backend.Place{Seen: busy[2], Named: true, Sent: time.Now()}

	sub := rdb.Subscribe(ctx, k.Wake.Base+c.id)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Unlock("a", 0, 0).Run(ctx, d).Err; err != nil {
		t.Fatal(err)
	}
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := protocol.ParseHandOff(msg.Payload)
	if !ok || protocol.TokenOf(msg.Payload) != "b" || m.MS <= 0 {
		t.Fatalf("hand-off message %q: parsed %+v, %v", msg.Payload, m, ok)
	}
	h, _ := protocol.ParseHold(rdb.Get(ctx, k.Lock).Val())
	if fence, _ := strconv.ParseInt(h.Fence, 10, 64); h.Token != "b" || fence != m.Fence || m.Fence <= b.Seen {
		t.Fatalf("message fence %d, hold's fence %d, b's attempt saw the counter at %d", m.Fence, fence, b.Seen)
	}
	if o, ok := acquisition.HandedOver(msg.Payload, b, c.drift); !ok || o.Fence != m.Fence {
		t.Fatalf("acquisition.HandedOver(%q, %+v) = %+v, %v; want the hand-off honoured", msg.Payload, b, o, ok)
	}

	// The handed hold ends (as an expiry would end it); b's next attempt
	// makes a new place and reports the counter at the hand-off's fence or
	// above: the old message no longer counts.
	rdb.Del(ctx, k.Lock)
	attempt("c", "")
	again := attempt("b", member)
	if len(again) != 3 || again[0] != protocol.ReplyBusy || again[2] < m.Fence {
		t.Fatalf("b's attempt after the hand-off = %v; want {busy, wait, >= %d}", again, m.Fence)
	}
	if _, ok := acquisition.HandedOver(msg.Payload, backend.Place{Seen: again[2], Named: true, Sent: time.Now()}, c.drift); ok {
		t.Fatalf("a hand-off older than b's latest attempt was honoured")
	}
	// A message of an older dlock (a Client not yet upgraded released the
	// lock: '<member> <fence> <ms> <place expiry>') is not one this waiter
	// can count on: it makes an ordinary attempt, which takes the lock if
	// it is its own.
	if _, ok := acquisition.HandedOver(member+" 99 30000 1764000000000", b, c.drift); ok {
		t.Fatalf("an older dlock's hand-off message was honoured")
	}
}
