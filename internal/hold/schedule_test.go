package hold

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The schedule hands holds back in time order through any mix of sets,
// moves and removals.
func TestScheduleOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	s := newSchedule(func(h *Hold) *slot { return &h.deadlineAt })
	base := time.Unix(0, 0)
	holds := make([]*Hold, 200)
	want := map[*Hold]time.Time{}
	for i := range holds {
		holds[i] = &Hold{deadlineAt: slot{index: -1}}
	}
	for range 5000 {
		h := holds[r.IntN(len(holds))]
		at := base.Add(time.Duration(r.IntN(1000)) * time.Millisecond)
		switch r.IntN(4) {
		case 0, 1:
			s.set(h, at)
			want[h] = at
		case 2:
			_, in := want[h]
			if first := s.sooner(h, at, false); first && s.holds[0] != h {
				t.Fatal("sooner says first, but it is not")
			}
			if in && at.Before(want[h]) {
				want[h] = at
			}
		case 3:
			s.remove(h)
			delete(want, h)
		}
	}
	if s.Len() != len(want) {
		t.Fatalf("%d in the schedule, want %d", s.Len(), len(want))
	}
	var got, exp []time.Time
	for s.Len() > 0 {
		h, at := s.first()
		if want[h] != at {
			t.Fatalf("a hold comes at %v, want %v", at, want[h])
		}
		got = append(got, at)
		s.remove(h)
		if h.deadlineAt.index != -1 {
			t.Fatal("a removed hold keeps its index")
		}
	}
	for _, at := range want {
		exp = append(exp, at)
	}
	slices.SortFunc(exp, func(a, b time.Time) int { return a.Compare(b) })
	if !slices.Equal(got, exp) {
		t.Fatal("holds not handed back in time order")
	}
}
