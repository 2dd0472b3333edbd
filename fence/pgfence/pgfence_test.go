package pgfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/pgfence"
	"github.com/dlock-go/dlock/internal/fencetest"
	"github.com/dlock-go/dlock/internal/pgtest"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx" driver
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

var (
	pg  *pgtest.Server    // the package's PostgreSQL
	srv *redistest.Server // and its redis-server, for the locks
)

const helperEnv = "PGFENCE_TEST_HELPER"

func TestMain(m *testing.M) {
	if kind := os.Getenv(helperEnv); kind != "" {
		os.Exit(holder(kind))
	}
	var err error
	if pg, err = pgtest.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "pgfence tests need PostgreSQL:", err)
		os.Exit(1)
	}
	if srv, err = redistest.Start(redistest.Options{}); err != nil {
		pg.Close()
		fmt.Fprintln(os.Stderr, "pgfence tests need redis-server:", err)
		os.Exit(1)
	}
	os.Setenv("DATABASE_URL", pg.URL()) // where the examples connect
	os.Setenv("REDIS_ADDR", srv.Addr())
	code := m.Run()
	srv.Close()
	pg.Close()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// token is a fence.Token of a given fence.
type token int64

func (t token) Fence() int64 { return int64(t) }

func newPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// table makes a data table for a test: resource -> value.
func table(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	name := "data_" + strings.ToLower(strings.NewReplacer("/", "_", "-", "_").Replace(t.Name()))
	if _, err := pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+name+"; CREATE TABLE "+name+
		" (k text PRIMARY KEY, v text NOT NULL, fence bigint NOT NULL, n serial)"); err != nil {
		t.Fatal(err)
	}
	return name
}

// put is a fenced write of k = v in data.
func put(data, k, v string, f int64) func(pgx.Tx) error {
	return func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), "INSERT INTO "+data+" (k, v, fence) VALUES ($1, $2, $3) "+
			"ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v, fence = EXCLUDED.fence", k, v, f)
		return err
	}
}

func value(t testing.TB, pool *pgxpool.Pool, data, k string) string {
	t.Helper()
	var v string
	if err := pool.QueryRow(context.Background(), "SELECT v FROM "+data+" WHERE k = $1", k).Scan(&v); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	return v
}

func TestDoRefusesALowerFence(t *testing.T) {
	ctx := context.Background()
	pool := newPool(t)
	g, err := pgfence.New(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	data, res := table(t, pool), t.Name()
	if err := g.Do(ctx, token(5), res, put(data, "a", "five", 5)); err != nil {
		t.Fatal(err)
	}
	if err := g.Do(ctx, token(5), res, put(data, "a", "five again", 5)); err != nil {
		t.Fatalf("an equal fence: %v", err)
	}
	ran := false
	err = g.Do(ctx, token(4), res, func(tx pgx.Tx) error { ran = true; return put(data, "a", "four", 4)(tx) })
	if !errors.Is(err, fence.ErrStale) || !strings.Contains(err.Error(), "accepted fence 5") || ran {
		t.Fatalf("a lower fence: %v (fn ran: %v); want ErrStale naming fence 5, fn not run", err, ran)
	}
	if v := value(t, pool, data, "a"); v != "five again" {
		t.Fatalf("data %q after a refused write", v)
	}
	mine := errors.New("mine")
	if err := g.Do(ctx, token(9), res, func(tx pgx.Tx) error { _ = put(data, "a", "nine", 9)(tx); return mine }); err != mine {
		t.Fatalf("fn's error: %v", err)
	}
	if f, err := g.Fence(ctx, res); err != nil || f != 5 {
		t.Fatalf("after fn failed the record is %d (%v); want 5: its transaction rolled back", f, err)
	}
	if v := value(t, pool, data, "a"); v != "five again" {
		t.Fatalf("a failed fn's write committed: %q", v)
	}
	if f, err := g.Fence(ctx, res+"/never"); err != nil || f != 0 {
		t.Fatalf("Fence of a resource never written: %d, %v", f, err)
	}
	// Another table, named
	g2, err := pgfence.New(ctx, pool, pgfence.WithTable("public.Other Fences"))
	if err != nil {
		t.Fatal(err)
	}
	if err := g2.Do(ctx, token(1), res, put(data, "b", "one", 1)); err != nil {
		t.Fatalf("a table of its own starts from nothing: %v", err)
	}
}

// Concurrent fenced transactions with mixed fences: the ones that commit
// do so in an order whose fences never go down (the serial n of their
// rows), and the data ends with the highest; a transaction of another
// resource is not held up by one that holds its resource.
func TestConcurrentWritersNeverGoBack(t *testing.T) {
	ctx := context.Background()
	pool := newPool(t)
	g, err := pgfence.New(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	data, res := table(t, pool), t.Name()
	if _, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+data+"_log (n serial, fence bigint)"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 25 {
				f := int64((i*7+w*13)%40 + 1)
				err := g.Do(ctx, token(f), res, func(tx pgx.Tx) error {
					if err := put(data, "k", fmt.Sprint(f), f)(tx); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, "INSERT INTO "+data+"_log (fence) VALUES ($1)", f)
					return err
				})
				if err != nil && !errors.Is(err, fence.ErrStale) {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	rows, err := pool.Query(ctx, "SELECT fence FROM "+data+"_log ORDER BY n")
	if err != nil {
		t.Fatal(err)
	}
	applied, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(applied); i++ {
		if applied[i] < applied[i-1] {
			t.Fatalf("fence %d committed after %d: %v", applied[i], applied[i-1], applied)
		}
	}
	if v := value(t, pool, data, "k"); v != "40" {
		t.Fatalf("data %q; want the highest fence's, 40", v)
	}

	// One resource held open; another commits meanwhile.
	held, release := make(chan struct{}), make(chan struct{})
	var heldErr error
	wg.Go(func() {
		heldErr = g.Do(ctx, token(100), res+"/a", func(tx pgx.Tx) error {
			close(held)
			<-release
			return nil
		})
	})
	<-held
	octx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if err := g.Do(octx, token(1), res+"/b", put(data, "b", "b", 1)); err != nil {
		t.Errorf("another resource's write while one is held: %v", err)
	}
	cancel()
	close(release)
	wg.Wait()
	if heldErr != nil {
		t.Fatal(heldErr)
	}
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	pool := newPool(t)
	g, err := pgfence.New(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	data := table(t, pool)
	var nilLease *dlock.Lease
	for what, err := range map[string]error{
		"nil token":      g.Do(ctx, nil, "r", put(data, "x", "v", 1)),
		"nil lease":      g.Do(ctx, nilLease, "r", put(data, "x", "v", 1)),
		"fence 0":        g.Do(ctx, token(0), "r", put(data, "x", "v", 1)),
		"negative fence": g.Do(ctx, token(-1), "r", put(data, "x", "v", 1)),
		"empty resource": g.Do(ctx, token(1), "", put(data, "x", "v", 1)),
		"nil fn":         g.Do(ctx, token(1), "r", nil),
	} {
		if !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%s: %v; want ErrInvalid", what, err)
		}
	}
	if v := value(t, pool, data, "x"); v != "" {
		t.Fatal("bad input wrote")
	}
	for what, opts := range map[string][]pgfence.Option{"empty table": {pgfence.WithTable("")}, "a.b.c": {pgfence.WithTable("a.b.c")}} {
		if _, err := pgfence.New(ctx, pool, opts...); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%s: %v", what, err)
		}
	}
	if _, err := pgfence.New(ctx, nil); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("nil pool: %v", err)
	}
	if _, err := pgfence.NewSQL(ctx, nil); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("nil db: %v", err)
	}
	closed, err := pgxpool.New(ctx, pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	gc, err := pgfence.New(ctx, closed)
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	if err := gc.Do(ctx, token(1), "r", put(data, "x", "v", 1)); err == nil || errors.Is(err, fence.ErrStale) {
		t.Fatalf("a closed pool: %v", err)
	}
}

func TestDatabaseSQL(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("pgx", pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	g, err := pgfence.NewSQL(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	data, res := table(t, newPool(t)), t.Name()
	write := func(f int64, v string) error {
		return g.Do(ctx, token(f), res, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO "+data+" (k, v, fence) VALUES ('k', $1, $2) "+
				"ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v, fence = EXCLUDED.fence", v, f)
			return err
		})
	}
	if err := write(7, "seven"); err != nil {
		t.Fatal(err)
	}
	if err := write(6, "six"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("a lower fence: %v", err)
	}
	if f, err := g.Fence(ctx, res); err != nil || f != 7 {
		t.Fatalf("Fence = %d, %v", f, err)
	}
	if v := value(t, newPool(t), data, "k"); v != "seven" {
		t.Fatalf("data %q", v)
	}
	// the pgx Guard sees the same record
	pg, err := pgfence.New(ctx, newPool(t))
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := pg.Fence(ctx, res); f != 7 {
		t.Fatalf("the pgx Guard reads %d", f)
	}
}

// The scene of Kleppmann's fencing argument, with real processes: a
// holder is stopped (SIGSTOP) past its lease; another takes the lock and
// commits a fenced transaction; the first resumes and tries its own:
// refused and rolled back, the row stays the newer writer's. For each kind
// that hands out fences.
func TestPausedHolderIsRefused(t *testing.T) {
	pool := newPool(t)
	data := table(t, pool)
	rdb := srv.Client()
	t.Cleanup(func() { _ = rdb.Close() }) // after the parallel subtests
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	g, err := pgfence.New(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range fencetest.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel() // a lock, a row and a holder process of its own; mostly waiting out a lease
			lock := strings.ReplaceAll(t.Name(), "/", ".")
			fencetest.PausedHolder(t, c, kind, lock, fencetest.Store{
				Env: []string{helperEnv + "=" + kind, "LOCK=" + lock, "DATA=" + data},
				Write: func(ctx context.Context, h fencetest.Hold) error {
					return g.Do(ctx, h, lock, put(data, lock, "new", h.Fence()))
				},
				Data: func(ctx context.Context) (string, error) {
					var v string
					err := pool.QueryRow(ctx, "SELECT v FROM "+data+" WHERE k = $1", lock).Scan(&v)
					return v, err
				},
				Fence: func(ctx context.Context) (int64, error) { return g.Fence(ctx, lock) },
			})
		})
	}
}

// holder is the helper process: fencetest.Holder, committing "old" in a
// fenced transaction.
func holder(kind string) int {
	ctx := context.Background()
	c, err := dlock.New(redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")}))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer pool.Close()
	g, err := pgfence.New(ctx, pool)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	lock, data := os.Getenv("LOCK"), os.Getenv("DATA")
	return fencetest.Holder(c, kind, lock, func(t fence.Token) error {
		return g.Do(ctx, t, lock, put(data, lock, "old", t.Fence()))
	})
}
