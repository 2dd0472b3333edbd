package dlock

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/goredis"
)

// lib.lua and protocol.go name the same protocol values.
func TestProtocolAgrees(t *testing.T) {
	lib, err := scriptFiles.ReadFile("scripts/lib.lua")
	if err != nil {
		t.Fatal(err)
	}
	lua := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^local ([A-Z_]+) = ('[^']*'|-?\d+)`).FindAllStringSubmatch(string(lib), -1) {
		lua[m[1]] = strings.Trim(m[2], "'")
	}
	want := map[string]string{
		"HELD":         strconv.Itoa(replyHeld),
		"BUSY":         strconv.Itoa(replyBusy),
		"NOT_HELD":     strconv.Itoa(replyNotHeld),
		"TOO_MANY":     strconv.Itoa(replyTooMany),
		"TTL_NOT_HELD": strconv.Itoa(replyTTLNotHeld),
		"STALE":        strconv.Itoa(replyStale),
		"WAKE_ALL":     wakeAll,
		"REFUSED":      refusedMark,
	}
	for name, v := range want {
		if lua[name] != v {
			t.Errorf("lib.lua %s = %q; protocol.go says %q", name, lua[name], v)
		}
	}
	if len(lua) != len(want) {
		t.Errorf("lib.lua names %v; protocol.go names %d values", lua, len(want))
	}
	// The hash fields inspection reads are the ones the scripts write.
	all := ""
	entries, _ := scriptFiles.ReadDir("scripts")
	for _, e := range entries {
		src, _ := scriptFiles.ReadFile("scripts/" + e.Name())
		all += string(src)
	}
	for _, f := range []string{fieldTaken, fieldSeq, fieldValue, fieldFence, fieldPermits, fieldMode, fieldNext} {
		if !strings.Contains(all, "'"+f+"'") {
			t.Errorf("no script names the hash field %q that inspect.go reads", f)
		}
	}
	// The scripts use the names, not the values.
	literal := regexp.MustCompile(`'(one|all|free:)'|return \{?-\d`)
	for _, e := range entries {
		if e.Name() == "lib.lua" {
			continue
		}
		src, _ := scriptFiles.ReadFile("scripts/" + e.Name())
		for i, line := range strings.Split(string(src), "\n") {
			if !strings.HasPrefix(strings.TrimSpace(line), "--") && literal.MatchString(line) {
				t.Errorf("%s:%d: a protocol value written out: %s", e.Name(), i+1, line)
			}
		}
	}
}

// The hand-off message lib_mutex.lua publishes is the one parseHandoff
// reads, and the value a waiting attempt of lock.lua reports (seen) is the
// fence counter as it found it: a hand-off that comes after that attempt
// has a fence above it (handedOver honours it); an attempt after the
// hand-off — here, once the handed hold is gone — reports a counter at
// or above the hand-off's fence, so the message is refused (handoff.go).
func TestHandOffMessageAgrees(t *testing.T) {
	ctx := context.Background()
	c, rdb := serverClient(t)
	d := goredis.New(rdb)
	k := c.keys(kindMutex, "x")
	p := mutexProto{k, k.wake}
	const ttl, placeTTL = time.Minute, 60000
	attempt := func(token, member string) []int64 {
		t.Helper()
		res, err := fenceReply("lock", "x", p.lock(token, ttl, 0, member, true, placeTTL, false).run(ctx, d))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := attempt("a", ""); res[0] != replyHeld {
		t.Fatalf("a's attempt = %v; want held", res)
	}
	member := handoffMember(c.member("b", 0), ttl)
	busy := attempt("b", member)
	if len(busy) != 3 || busy[0] != replyBusy {
		t.Fatalf("b's attempt = %v; want {busy, wait, seen}", busy)
	}
	b := place{seen: busy[2], named: true, sent: time.Now()}

	sub := rdb.Subscribe(ctx, k.wake.base+c.id)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.unlock("a", 0, 0).run(ctx, d).Err; err != nil {
		t.Fatal(err)
	}
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := parseHandoff(msg.Payload)
	if !ok || tokenOf(msg.Payload) != "b" || m.ms <= 0 {
		t.Fatalf("hand-off message %q: parsed %+v, %v", msg.Payload, m, ok)
	}
	if fence, _ := rdb.HGet(ctx, k.lock, fieldFence+"b").Int64(); fence != m.fence || m.fence <= b.seen {
		t.Fatalf("message fence %d, hold's fence %d, b's attempt saw the counter at %d", m.fence, fence, b.seen)
	}
	if o, ok := handedOver(msg.Payload, b, c.drift); !ok || o.fence != m.fence {
		t.Fatalf("handedOver(%q, %+v) = %+v, %v; want the hand-off honoured", msg.Payload, b, o, ok)
	}

	// The handed hold ends (as an expiry would end it); b's next attempt
	// makes a new place and reports the counter at the hand-off's fence or
	// above: the old message no longer counts.
	rdb.Del(ctx, k.lock)
	attempt("c", "")
	again := attempt("b", member)
	if len(again) != 3 || again[0] != replyBusy || again[2] < m.fence {
		t.Fatalf("b's attempt after the hand-off = %v; want {busy, wait, >= %d}", again, m.fence)
	}
	if _, ok := handedOver(msg.Payload, place{seen: again[2], named: true, sent: time.Now()}, c.drift); ok {
		t.Fatalf("a hand-off older than b's latest attempt was honoured")
	}
	// A message of an older dlock (a Client not yet upgraded released the
	// lock: '<member> <fence> <ms> <place expiry>') is not one this waiter
	// can count on: it makes an ordinary attempt, which takes the lock if
	// it is its own.
	if _, ok := handedOver(member+" 99 30000 1764000000000", b, c.drift); ok {
		t.Fatalf("an older dlock's hand-off message was honoured")
	}
}
