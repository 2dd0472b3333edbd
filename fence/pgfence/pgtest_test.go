package pgfence_test

import (
	"context"
	"testing"

	"github.com/dlock-go/dlock/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

// TestPGTestStartsAServer checks internal/pgtest, which has no tests of its
// own: it lives in the library's module, which does not require pgx, so the
// check that its server answers is here, beside the module that does.
func TestPGTestStartsAServer(t *testing.T) {
	s := pgtest.StartT(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.URL())
	if err != nil {
		t.Fatalf("%v\n%s", err, s.Log())
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "select 1 + 1").Scan(&n); err != nil || n != 2 {
		t.Fatalf("select: %d, %v", n, err)
	}
}
