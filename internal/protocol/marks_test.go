package protocol

import (
	"context"
	"fmt"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// Every pair of marks that can meet on one token in a lock's dead set
// (the ledger: mark, receipt and sent_again in lib_queue.lua), on Redis 7
// (ZADD GT) and on a server before Redis 6.2 (a shim that refuses GT, as
// before7 refuses PEXPIRE's options): the later mark never shortens the
// earlier one, and only a release's receipt answers "released".
//
//   - a burial, then the lease's own receipt (a slow acquire's final
//     release: issue 45, 7 — the receipt cut the burial to the TTL);
//   - a receipt, then a burial (a background release tried again after
//     the release ran buries the token again before its copy);
//   - a burial, then a shorter or a longer one;
//   - a burial alone (a lease forced away, then released: issue 45, 8 —
//     it answered "released");
//   - a force's receipt beside a burial (members of their own).
func TestMarksNeverShorten(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.StartT(t, redistest.Options{}).Client()
	t.Cleanup(func() { rdb.Close() })
	lib, err := ScriptFiles.ReadFile("scripts/lib.lua")
	if err != nil {
		t.Fatal(err)
	}
	queue, err := ScriptFiles.ReadFile("scripts/lib_queue.lua")
	if err != nil {
		t.Fatal(err)
	}
	const body = `
local function op(kind, ttl)
  if kind == 'bury' then
    mark(KEYS[1], ttl, 'tok')
  elseif kind == 'receipt' then
    receipt(KEYS[1], 'tok', ttl)
  elseif kind == 'force' then
    forced(KEYS[1], 'id', 1, ttl)
  end
end
op(ARGV[1], ARGV[2])
op(ARGV[3], ARGV[4])
local now = now_ms()
local function left(m)
  local s = redis.call('ZSCORE', KEYS[1], m)
  if not s then
    return -1
  end
  return tonumber(s) - now
end
local released = 0
if sent_again(KEYS[1], 'tok', '1') then
  released = 1
end
return {left('tok'), left('rel:tok'), left('force:id:1'), released, redis.call('PTTL', KEYS[1])}
`
	type want struct{ refused, released, force, answer int64 }
	for _, c := range []struct {
		what         string
		first, ttl1  string
		second, ttl2 string
		want         want
	}{
		{"burial then receipt", "bury", "20000", "receipt", "1500", want{20000, 1500, -1, 1}},
		{"receipt then burial", "receipt", "1500", "bury", "20000", want{20000, 1500, -1, 1}},
		{"long receipt then short burial", "receipt", "20000", "bury", "1500", want{20000, 20000, -1, 1}},
		{"burial then a shorter burial", "bury", "20000", "bury", "1500", want{20000, -1, -1, 0}},
		{"burial then a longer burial", "bury", "1500", "bury", "20000", want{20000, -1, -1, 0}},
		{"burial alone", "bury", "20000", "", "0", want{20000, -1, -1, 0}},
		{"burial then force", "bury", "20000", "force", "1500", want{20000, -1, 1500, 0}},
		{"force then receipt", "force", "20000", "receipt", "1500", want{1500, 1500, 20000, 1}},
	} {
		for _, old := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/before6.2=%v", c.what, old), func(t *testing.T) {
				src := string(lib) + string(queue) + body
				if old {
					src = before7 + src
				}
				key := fmt.Sprintf("dead:%s:%v", c.what, old)
				got, err := rdb.Eval(ctx, src, []string{key}, c.first, c.ttl1, c.second, c.ttl2).Int64Slice()
				if err != nil {
					t.Fatal(err)
				}
				g := want{got[0], got[1], got[2], got[3]}
				if g != c.want {
					t.Fatalf("marks left (ms: refused, released, force; released answer) = %+v; want %+v", g, c.want)
				}
				longest := max(c.want.refused, c.want.released, c.want.force)
				if got[4] < longest-50 || got[4] > longest {
					t.Fatalf("the dead set lives %d ms; want its longest mark's %d", got[4], longest)
				}
			})
		}
	}
}
