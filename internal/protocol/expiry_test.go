package protocol

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// helperText is the text of the helper called name in a lib_*.lua file.
func helperText(t *testing.T, file, name string) string {
	t.Helper()
	b, err := ScriptFiles.ReadFile("scripts/" + file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	for i, l := range lines {
		if m := helperDef.FindStringSubmatch(l); m == nil || m[1] != name {
			continue
		}
		var text strings.Builder
		for _, l := range lines[i:] {
			text.WriteString(l)
			if strings.TrimRight(l, "\r\n") == "end" {
				return text.String()
			}
		}
	}
	t.Fatalf("no helper %s in %s", name, file)
	return ""
}

// before7 makes the script that follows see a server before Redis 7,
// which refuses PEXPIRE's options (NX, GT) as a wrong number of arguments.
const before7 = `local real = redis
local redis = setmetatable({pcall = function(...)
  if select('#', ...) > 3 then
    return {err = "ERR wrong number of arguments for 'pexpire' command"}
  end
  return real.pcall(...)
end}, {__index = real})
`

// stretch and keep (lib_queue.lua, lib_sem.lua) set a key's expiry where
// PTTL then PEXPIRE did, on Redis 7 (PEXPIRE NX and GT, in either order)
// and on a server before it (PTTL, then PEXPIRE): a missing key stays
// missing, a key without an expiry gets one from stretch and keeps none
// with keep, a sooner expiry grows, a later one stays.
func TestStretchSetsExpiryAsPTTLWould(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.StartT(t, redistest.Options{}).Client()
	t.Cleanup(func() { rdb.Close() })
	const ttl = 5000
	calls := map[string]string{
		"stretch":     "stretch(KEYS[1], ARGV[1])",
		"stretch new": "stretch(KEYS[1], ARGV[1], true)",
		"keep":        "keep(KEYS[1], ARGV[1])",
	}
	for _, old := range []bool{false, true} {
		for name, call := range calls {
			fn := helperText(t, "lib_queue.lua", "stretch")
			if name == "keep" {
				fn = helperText(t, "lib_sem.lua", "keep")
			}
			src := fn + call + "\nreturn redis.call('PTTL', KEYS[1])\n"
			if old {
				src = before7 + src
			}
			for _, c := range []struct {
				what      string
				expiry    time.Duration // -1: none; 0: no key
				want      int64         // ms left, ±50; -1 none; -2 no key
				keepsNone bool          // keep leaves a key without expiry so
			}{
				{"no key", 0, -2, false},
				{"no expiry", -1, ttl, true},
				{"a sooner expiry", time.Second, ttl, false},
				{"a later expiry", 9 * time.Second, 9000, false},
			} {
				t.Run(fmt.Sprintf("%s/before7=%v/%s", name, old, c.what), func(t *testing.T) {
					key := fmt.Sprintf("k:%s:%v:%s", name, old, c.what)
					switch {
					case c.expiry < 0:
						rdb.Set(ctx, key, "v", 0)
					case c.expiry > 0:
						rdb.Set(ctx, key, "v", c.expiry)
					}
					got, err := rdb.Eval(ctx, src, []string{key}, ttl).Int64()
					if err != nil {
						t.Fatal(err)
					}
					want := c.want
					if name == "keep" && c.keepsNone {
						want = -1
					}
					if want < 0 && got != want || want > 0 && (got < want-50 || got > want) {
						t.Fatalf("PTTL after = %d; want %d", got, want)
					}
				})
			}
		}
	}
}
