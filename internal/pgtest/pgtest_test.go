package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestStart(t *testing.T) {
	s := StartT(t)
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
