package backoff

import (
	"testing"
	"time"
)

func TestDoubling(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name       string
		first, max time.Duration
		want       []time.Duration
	}{
		{"doubles up to the cap", 10 * ms, 50 * ms, []time.Duration{10 * ms, 20 * ms, 40 * ms, 50 * ms, 50 * ms}},
		{"a cap that is a doubling", 8 * ms, 32 * ms, []time.Duration{8 * ms, 16 * ms, 32 * ms, 32 * ms}},
		{"first is the cap", 5 * ms, 5 * ms, []time.Duration{5 * ms, 5 * ms, 5 * ms}},
		{"a nanosecond", 1, 4, []time.Duration{1, 2, 4, 4}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := New(c.first, c.max)
			for i, w := range c.want {
				if got := b.Next(); got != w {
					t.Fatalf("pause %d: got %v, want %v", i, got, w)
				}
			}
			b.Reset()
			if got := b.Next(); got != c.first {
				t.Fatalf("after Reset: got %v, want %v", got, c.first)
			}
			if got := b.Next(); got != min(2*c.first, c.max) {
				t.Fatalf("after Reset, second: got %v, want %v", got, min(2*c.first, c.max))
			}
		})
	}
}

// TestDoublingIsAValue: a copy goes on by itself (each call its own
// pauses), and New's fresh value starts at first whatever another did.
func TestDoublingIsAValue(t *testing.T) {
	a := New(time.Millisecond, time.Second)
	a.Next()
	a.Next()
	b := a
	if got, want := b.Next(), 4*time.Millisecond; got != want {
		t.Fatalf("copy: got %v, want %v", got, want)
	}
	if got, want := a.Next(), 4*time.Millisecond; got != want {
		t.Fatalf("original after the copy's Next: got %v, want %v", got, want)
	}
	fresh := New(time.Millisecond, time.Second)
	if got, want := fresh.Next(), time.Millisecond; got != want {
		t.Fatalf("fresh: got %v, want %v", got, want)
	}
}

// TestDoublingNeverOverflows: a long loop stays at its cap.
func TestDoublingNeverOverflows(t *testing.T) {
	b := New(time.Nanosecond, time.Duration(1<<62))
	for range 200 {
		if d := b.Next(); d <= 0 || d > time.Duration(1<<62) {
			t.Fatalf("pause %v out of (0, cap]", d)
		}
	}
}

func TestNewRefusesMisuse(t *testing.T) {
	for _, c := range [][2]time.Duration{{0, time.Second}, {-1, time.Second}, {time.Second, time.Millisecond}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(%v, %v) did not panic", c[0], c[1])
				}
			}()
			New(c[0], c[1])
		}()
	}
}
