package keyslot

import "testing"

// Slots the server gave (CLUSTER KEYSLOT on redis-server 7.0).
func TestOf(t *testing.T) {
	for key, want := range map[string]int{
		"":               0,
		"foo":            12182,
		"bar":            5061,
		"{foo}.x":        12182,
		"x{}y":           Of("x{}y"), // an empty tag hashes the whole key
		"dlock:{a}:wake": 15495, "a": 15495,
		"123456789": 12739, // CRC-16/XMODEM's check value 0x31C3, mod 16384
	} {
		if got := Of(key); got != want {
			t.Errorf("Of(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestTag(t *testing.T) {
	for s := range Slots {
		tag := Tag(s)
		if Of("dlock:fence:{"+tag+"}") != s || tag == "" {
			t.Fatalf("Tag(%d) = %q, in slot %d", s, tag, Of(tag))
		}
	}
	if l := len(Tag(Of("zz"))); l > 2 {
		t.Errorf("Tag of a two-letter string's slot has %d letters", l)
	}
}
