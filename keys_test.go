package dlock

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/backend"

	"github.com/dlock-go/dlock/internal/protocol"

	"github.com/dlock-go/dlock/internal/redistest"
)

func TestKeysShareOneSlot(t *testing.T) {
	names := []string{"orders/42", "{", "}", "a}b", "{x}", "%7D", "with space", "new\nline", "日本"} // "" is refused by Lock
	for _, n := range names {
		k := protocol.NewKeysOf("p", protocol.RWKind, n, "") // the fence counter of its slot, as on a cluster
		s := redistest.KeySlot(k.Lock)
		if redistest.KeySlot(k.Fence) != s || redistest.KeySlot(k.Channel) != s {
			t.Errorf("name %q: keys %q %q %q in different slots", n, k.Lock, k.Fence, k.Channel)
		}
		// The tag is exactly the escaped name.
		if want := redistest.KeySlot("{" + protocol.EscapeTag(n) + "}"); s != want {
			t.Errorf("name %q: slot %d, want the slot of its escaped name %d", n, s, want)
		}
	}
}

func TestEscapeIsOneToOne(t *testing.T) {
	names := []string{"a}", "a%7D", "a%257D", "{", "%7B", "%", "%25", "a", ""}
	seen := map[string]string{}
	for _, n := range names {
		e := protocol.EscapeTag(n)
		if o, dup := seen[e]; dup {
			t.Fatalf("names %q and %q both escape to %q", o, n, e)
		}
		seen[e] = n
		for _, r := range e {
			if r == '{' || r == '}' {
				t.Fatalf("escaped %q still has a brace: %q", n, e)
			}
		}
	}
}

func TestValidPrefix(t *testing.T) {
	for p, want := range map[string]bool{"dlock": true, "my:app": true, "": false, "a{": false, "}": false} {
		if protocol.ValidPrefix(p) != want {
			t.Errorf("ValidPrefix(%q) = %v", p, !want)
		}
	}
}

func TestDriftAndRetry(t *testing.T) {
	if d := defaultDrift.Of(30 * time.Second); d != 302*time.Millisecond {
		t.Errorf("drift(30s) = %v, want 302ms", d)
	}
	if d := defaultDrift.Of(100 * time.Millisecond); d != 3*time.Millisecond {
		t.Errorf("drift(100ms) = %v, want 3ms", d)
	}
	tests := []struct {
		pttl int64
		want time.Duration
	}{
		{1500, 1500 * time.Millisecond},
		{0, 0},
		{-1, time.Minute}, // a key without expiry: retry after our TTL
	}
	for _, tt := range tests {
		if got := backend.RetryAfter(tt.pttl, time.Minute); got != tt.want {
			t.Errorf("retryAfter(%d) = %v, want %v", tt.pttl, got, tt.want)
		}
	}
}

func TestKeysOf(t *testing.T) {
	k, err := KeysOf("app", "a{b}%")
	if err != nil {
		t.Fatal(err)
	}
	if k.Lock != "app:{a%7Bb%7D%25}" || k.Fence != "app:fence" || k.Channel != k.Lock+":ch" ||
		redistest.KeySlot(k.SlotFence) != redistest.KeySlot(k.Lock) || !strings.HasPrefix(k.SlotFence, "app:fence:{") {
		t.Fatalf("KeysOf = %+v", k)
	}
	for _, bad := range [][2]string{{"", "x"}, {"a{", "x"}, {"app", ""}} {
		if _, err := KeysOf(bad[0], bad[1]); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("KeysOf(%q, %q): %v", bad[0], bad[1], err)
		}
	}
}

// Each kind of lock has its own keys: locks of different kinds called
// alike never touch each other's keys. A kind has the common names and
// its own, and no other kind's.
func TestKindsHaveDisjointKeys(t *testing.T) {
	kinds := protocol.Kinds
	all := func(k *protocol.Keys) []string {
		var out []string
		for _, key := range []string{k.Lock, k.Channel, k.Queue, k.Alive, k.Dead, // the fence counter is shared
			k.Readers, k.RQueue, k.RPhase, k.Leases, k.Permits, k.Calls, k.CallsPrev, k.IDs} {
			if key != "" { // another kind's (see protocol.NewKeys)
				out = append(out, key)
			}
		}
		return out
	}
	own := map[*protocol.Kind]int{protocol.MutexKind: 5, protocol.RWKind: 8, protocol.SemaphoreKind: 7, protocol.LatchKind: 8, protocol.ElectionKind: 5}
	owner := map[string]*protocol.Kind{}
	for _, kd := range kinds {
		if n := len(all(protocol.NewKeys("p", kd, "x"))); n != own[kd] {
			t.Errorf("kind %q has %d keys, want %d", kd.Name, n, own[kd])
		}
		for _, name := range []string{"x", "x:rw", "x}:rw"} {
			for _, key := range all(protocol.NewKeys("p", kd, name)) {
				if o, ok := owner[key]; ok && o != kd {
					t.Errorf("key %q is used by kinds %q and %q", key, o.Name, kd.Name)
				}
				owner[key] = kd
			}
		}
	}
}

// The kinds are listed once, in protocol.Kinds: the public Kind of each
// is its name, inspection has one entry per kind, and every key a kind's
// lock has parses back to that kind and name.
func TestKindsListedOnce(t *testing.T) {
	public := []Kind{KindMutex, KindRWMutex, KindSemaphore, KindLatch, KindElection}
	if len(public) != len(protocol.Kinds) || len(kindSpecs) != len(protocol.Kinds) {
		t.Fatalf("%d public kinds, %d inspection entries, %d protocol kinds", len(public), len(kindSpecs), len(protocol.Kinds))
	}
	for i, kd := range protocol.Kinds {
		if Kind(kd.Name) != public[i] {
			t.Errorf("protocol kind %d is %q; the public one %q", i, kd.Name, public[i])
		}
		if sp := kindSpecs[Kind(kd.Name)]; sp == nil || sp.keys != kd {
			t.Errorf("kind %q: no inspection entry of its own", kd.Name)
		}
		k := protocol.NewKeys("p", kd, "a}b:rw")
		for _, key := range []string{k.Lock, k.Queue, k.Alive, k.Readers, k.RQueue, k.RPhase, k.Leases, k.Permits, k.Calls, k.CallsPrev, k.IDs} {
			if key == "" {
				continue
			}
			if got, name, ok := protocol.ParseKey("p", key); !ok || got != kd || name != "a}b:rw" {
				t.Errorf("key %q parses as %v %q %v; want kind %q", key, got, name, ok, kd.Name)
			}
		}
	}
	if _, _, ok := protocol.ParseKey("p", protocol.NewKeys("p", protocol.MutexKind, "x").Dead); ok {
		t.Error("a dead set parses as a lock")
	}
}
