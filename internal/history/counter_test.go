package history

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

func TestCounter(t *testing.T) {
	srv := redistest.StartT(t, redistest.Options{})
	client := srv.Client()
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	t.Run("missing key is zero", func(t *testing.T) {
		c := NewCounter(client, "missing")
		if v, err := c.Value(ctx); err != nil || v != 0 {
			t.Fatalf("Value = %d, %v", v, err)
		}
	})

	t.Run("mutual exclusion keeps every update", func(t *testing.T) {
		c := NewCounter(client, "locked")
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < 5; j++ {
					mu.Lock()
					err := c.Increment(ctx, time.Millisecond)
					mu.Unlock()
					if err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if v, err := c.Value(ctx); err != nil || v != 20 {
			t.Fatalf("Value = %d, %v; want 20", v, err)
		}
	})

	t.Run("no exclusion loses updates", func(t *testing.T) {
		c := NewCounter(client, "unlocked")
		var wg sync.WaitGroup
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := c.Increment(ctx, 100*time.Millisecond); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if v, err := c.Value(ctx); err != nil || v >= 4 {
			t.Fatalf("Value = %d, %v; want lost updates (< 4)", v, err)
		}
	})

	t.Run("pause honours context", func(t *testing.T) {
		c := NewCounter(client, "cancelled")
		cctx, ccancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer ccancel()
		if err := c.Increment(cctx, time.Minute); err == nil {
			t.Fatal("Increment ignored cancellation")
		}
		if v, _ := c.Value(ctx); v != 0 {
			t.Fatalf("cancelled increment wrote %d", v)
		}
	})
}
