package backend

import (
	"time"

	"github.com/dlock-go/dlock/internal/protocol"
)

// BuryCall is bury.lua for token: its late attempts are refused for
// BuryFor(cfg).
func BuryCall(k *protocol.Keys, token string, cfg LockConfig) protocol.Call {
	return protocol.BuryArgs{Token: token, For: BuryFor(cfg).Milliseconds()}.Call(k)
}

// BuryFor is how long a buried token is refused: twice the longest the
// acquire's lease or place could last.
func BuryFor(cfg LockConfig) time.Duration { return 2 * max(cfg.TTL, cfg.QueueTTL) }
