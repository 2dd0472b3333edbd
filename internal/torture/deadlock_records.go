//go:build unix

package torture

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// checkWaitRecords runs once the workers are quiet (no acquire in
// flight): every wait record left (<prefix>:wait:*: a worker killed
// while it waited, a DEL lost to a fault) must have a TTL no longer than
// the one it was written with, and be gone by then — nobody may keep
// writing it. A server clock that stood still may delay the expiry by
// the fault's length: 2 s more are allowed.
func (r *runner) checkWaitRecords(quiet int64) []Violation {
	rdb := r.srv.Client()
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	keys, err := rdb.Keys(ctx, prefix+":wait:*").Result()
	if err != nil {
		return []Violation{{Kind: "process", T: now(), Msg: fmt.Sprintf("wait records: KEYS: %v", err)}}
	}
	var vs []Violation
	for _, k := range keys {
		v, err := rdb.Get(ctx, k).Result()
		if err != nil {
			continue // (expired meanwhile)
		}
		var rec struct {
			TTL int64 `json:"x"`
		}
		_ = json.Unmarshal([]byte(v), &rec)
		pttl, _ := rdb.PTTL(ctx, k).Result()
		bad := func(cat, format string, args ...any) {
			vs = append(vs, Violation{Kind: "deadlock", Cat: "deadlock: " + cat, T: now(), Msg: fmt.Sprintf("%s = %s: ", k, v) + fmt.Sprintf(format, args...)})
		}
		switch {
		case pttl == -2: // (go-redis: -2, no such key: expired meanwhile)
			continue
		case pttl < 0:
			bad("a wait record without a TTL", "PTTL %v", pttl)
			continue
		case rec.TTL > 0 && pttl > time.Duration(rec.TTL)*time.Millisecond:
			bad("a wait record with a TTL longer than it was written with", "PTTL %v, written with %v", pttl, time.Duration(rec.TTL)*time.Millisecond)
		}
		deadline := time.Now().Add(pttl + 2*time.Second)
		for {
			n, err := rdb.Exists(ctx, k).Result()
			if err != nil || n == 0 {
				break
			}
			if time.Now().After(deadline) {
				p, _ := rdb.PTTL(ctx, k).Result()
				bad("a wait record kept alive with no wait", "still there %v after the workers were quiet (PTTL %v then, %v now)",
					time.Duration(now()-quiet).Round(time.Millisecond), pttl, p)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return vs
}
