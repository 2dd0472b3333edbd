// Package keyslot computes a Redis Cluster key's hash slot, as the server
// does: CRC-16/XMODEM (polynomial 0x1021) of the key, or of its hash tag
// (the part between the first "{" and the next "}", if not empty), modulo
// 16384.
package keyslot

import (
	"strings"
	"sync"
)

// Slots is how many hash slots a Redis Cluster has.
const Slots = 16384

// Of returns key's hash slot.
func Of(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % Slots
}

// Tag returns a short string whose slot is slot (0 <= slot < Slots): put
// between braces in a key, it puts the key in that slot. The same slot
// always gets the same tag (the first of the strings "0"…"z", "00"…, in
// that order, that falls in it).
func Tag(slot int) string { return tags()[slot] }

// tags is the table Tag reads, made at its first call (some 10 ms).
var tags = sync.OnceValue(func() []string {
	const alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
	out := make([]string, Slots)
	left := Slots
	buf := make([]byte, 0, 4)
	var walk func(n int)
	walk = func(n int) {
		if n == 0 {
			if s := Of(string(buf)); out[s] == "" {
				out[s] = string(buf)
				left--
			}
			return
		}
		for i := 0; i < len(alphabet) && left > 0; i++ {
			buf = append(buf, alphabet[i])
			walk(n - 1)
			buf = buf[:len(buf)-1]
		}
	}
	for n := 1; left > 0; n++ {
		walk(n)
	}
	return out
})
