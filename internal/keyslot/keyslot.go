// Package keyslot computes a Redis Cluster key's hash slot, as the server
// does: CRC-16/XMODEM (polynomial 0x1021) of the key, or of its hash tag
// (the part between the first "{" and the next "}", if not empty), modulo
// 16384.
package keyslot

import "strings"

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
