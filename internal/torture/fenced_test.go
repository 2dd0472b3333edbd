package torture

import (
	"strings"
	"testing"
)

// The fenced store's check sees each way a guard could fail: a lower
// fence accepted after a higher one, a write reported committed that is
// not in the store, one refused as stale that is; a sound history passes.
func TestCheckFencedStore(t *testing.T) {
	write := func(id string, f int64, ek string) Event {
		return Event{T: 5 * ms, K: kFWrite, W: "w0.0", Names: []string{"m0"}, Fences: []int64{f}, Msg: id, EK: ek}
	}
	log := func(fs []int64, ids ...string) Event {
		return Event{T: 100 * ms, K: kFLog, W: "parent", Names: []string{"m0"}, Fences: fs, Owners: ids}
	}
	for _, tc := range []struct {
		name   string
		events []Event
		want   string // "" : no violation
	}{
		{"sound", []Event{write("a", 3, ""), write("b", 5, ""), write("c", 4, "stale"), write("d", 6, "ctx"),
			log([]int64{3, 5, 5}, "a", "b", "x")}, ""},
		{"a lower fence after a higher", []Event{write("a", 5, ""), write("b", 4, ""), log([]int64{5, 4}, "a", "b")},
			"a lower fence accepted after a higher"},
		{"committed, not in the store", []Event{write("a", 5, ""), log([]int64{4}, "z")},
			"a committed write not in the store once"},
		{"committed twice", []Event{write("a", 5, ""), log([]int64{5, 5}, "a", "a")},
			"a committed write not in the store once"},
		{"stale, applied", []Event{write("a", 5, ""), write("b", 4, "stale"), log([]int64{4, 5}, "b", "a")},
			"a write refused as stale was applied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := index(tc.events, 0, 200*ms).checkFencedStore()
			switch {
			case tc.want == "" && len(vs) > 0:
				t.Fatalf("violations in a sound history: %v", vs)
			case tc.want != "" && (len(vs) == 0 || !strings.Contains(vs[0].Cat, tc.want)):
				t.Fatalf("violations %v; want %q", vs, tc.want)
			}
		})
	}
}
