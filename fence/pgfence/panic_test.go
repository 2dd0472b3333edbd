package pgfence_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/pgfence"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// panics runs f and returns what it panicked with (nil: it returned).
func panics(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

// A panic in fn rolls the transaction back before it goes on up: the
// resource's row is not left locked by an idle transaction (the next Do
// of the resource would wait its whole ctx) and the connection goes back
// to the pool.
func TestPanicInFnRollsBack(t *testing.T) {
	ctx := context.Background()
	// A pool of its own, closed only when nothing is taken from it (Close
	// waits for what is taken: a leaked connection would hang the test).
	pool, err := pgxpool.New(ctx, pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if pool.Stat().AcquiredConns() == 0 {
			pool.Close()
		}
	})
	g, err := pgfence.New(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	data, res := table(t, newPool(t)), t.Name()
	boom := errors.New("boom")
	v := panics(func() {
		_ = g.Do(ctx, token(1), res, func(tx pgx.Tx) error {
			if err := put(data, "k", "panicked", 1)(tx); err != nil {
				t.Error(err)
			}
			panic(boom)
		})
	})
	if v != boom {
		t.Fatalf("Do's panic came out as %v; want fn's own", v)
	}
	if n := pool.Stat().AcquiredConns(); n != 0 {
		t.Errorf("%d connections still taken from the pool after the panic", n)
	}
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := g.Do(short, token(2), res, put(data, "k", "after", 2)); err != nil {
		t.Fatalf("the next Do of the resource after a panic: %v", err)
	}
	if v := value(t, pool, data, "k"); v != "after" {
		t.Fatalf("data %q", v)
	}

	// The same on database/sql.
	db, err := sql.Open("pgx", pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sg, err := pgfence.NewSQL(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if v := panics(func() {
		_ = sg.Do(ctx, token(3), res, func(*sql.Tx) error { panic(boom) })
	}); v != boom {
		t.Fatalf("SQLGuard.Do's panic came out as %v", v)
	}
	if n := db.Stats().InUse; n != 0 {
		t.Fatalf("%d database/sql connections still in use after the panic", n)
	}
	short2, cancel2 := context.WithTimeout(ctx, 5*time.Second)
	defer cancel2()
	if err := g.Do(short2, token(4), res, put(data, "k", "after sql", 4)); err != nil {
		t.Fatalf("the next Do of the resource after a panic in SQLGuard.Do: %v", err)
	}
}

// Resource names PostgreSQL cannot store as the record's key are bad
// input, said so before anything is sent, not PostgreSQL's error.
func TestResourceNamesPostgreSQLRefuses(t *testing.T) {
	ctx := context.Background()
	pool := newPool(t)
	g, err := pgfence.New(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sg, err := pgfence.NewSQL(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	data := table(t, pool)
	for what, res := range map[string]string{
		"NUL byte":      "a\x00b",
		"invalid UTF-8": "a\xffb",
		"4 KB":          strings.Repeat("x", 4096),
		"3 KB random":   randomish(3000),
	} {
		ran := false
		fn := func(pgx.Tx) error { ran = true; return nil }
		for call, err := range map[string]error{
			"Do":             g.Do(ctx, token(1), res, fn),
			"SQLGuard.Do":    sg.Do(ctx, token(1), res, func(*sql.Tx) error { ran = true; return nil }),
			"Fence":          second(g.Fence(ctx, res)),
			"SQLGuard.Fence": second(sg.Fence(ctx, res)),
		} {
			if !errors.Is(err, fence.ErrInvalid) {
				t.Errorf("%s of a resource with a %s: %v; want ErrInvalid", call, what, err)
			}
		}
		if ran {
			t.Errorf("fn ran for a resource with a %s", what)
		}
	}
	_ = data
	// The longest accepted name works.
	long := randomish(pgfence.MaxResource)
	if err := g.Do(ctx, token(1), long, put(data, "k", "v", 1)); err != nil {
		t.Fatalf("a resource name of %d bytes: %v", len(long), err)
	}
	if f, err := g.Fence(ctx, long); f != 1 || err != nil {
		t.Fatalf("Fence = %d, %v", f, err)
	}
}

func second(_ int64, err error) error { return err }

// randomish is n bytes of printable ASCII that do not compress.
func randomish(n int) string {
	b := make([]byte, n)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte('!' + x%94)
	}
	return string(b)
}
