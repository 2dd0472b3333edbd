// Package pgfence makes PostgreSQL check the fence of every write to a
// resource: a holder whose lock was lost while it was paused, and whose
// resource has since accepted a newer owner's write, is refused with
// fence.ErrStale and its transaction rolls back, instead of overwriting
// newer data.
//
// A Guard keeps, per resource, the highest fence it has accepted, in a
// table of its own (dlock_fences unless WithTable; created if missing):
//
//	resource text PRIMARY KEY, fence bigint NOT NULL, updated_at timestamptz
//
// Do runs the caller's function in a transaction that first records the
// fence: an INSERT ... ON CONFLICT DO UPDATE that raises the resource's row
// only if its fence is at most this one. That statement locks the row until
// the transaction ends, so fenced transactions of one resource run one
// after another (in the order the locks are granted: a lower fence that
// comes after a higher one is refused), and those of different resources
// do not wait for each other. An equal fence is accepted (one holder
// writes many times).
//
// A panic in the caller's function rolls the transaction back (the row is
// not left locked) and goes on up. A resource name is at most MaxResource
// bytes of valid UTF-8 without NUL.
//
// What a Guard does not promise: writes that bypass it are not fenced (put
// every write of a fenced resource through Do); a transaction of Do holds
// the resource's row until it ends, so keep it short; the record is as
// durable as the transaction that wrote it.
package pgfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/dlock-go/dlock/fence"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultTable is the table of the records unless WithTable.
const DefaultTable = "dlock_fences"

// MaxResource is the longest resource name a Guard takes, in bytes: the
// record's primary key must fit in a B-tree index entry (PostgreSQL's
// limit is about 2.7 KB). A longer name, one with a NUL byte or one that
// is not valid UTF-8 (PostgreSQL's text stores neither) is refused with
// an error matching fence.ErrInvalid before anything is sent.
const MaxResource = 2048

// Option configures a Guard.
type Option func(*config)

type config struct{ table string }

// WithTable names the records' table ("name" or "schema.name"; quoted as
// identifiers, so any name works).
func WithTable(name string) Option { return func(c *config) { c.table = name } }

// Guard checks the fences of transactions on a pgx pool. It is safe for
// concurrent use.
type Guard struct {
	pool *pgxpool.Pool
	q    queries
}

// queries are the statements of one table.
type queries struct {
	create, record, highest string
}

func newQueries(opts []Option) (queries, error) {
	c := config{table: DefaultTable}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	parts := strings.Split(c.table, ".")
	if c.table == "" || len(parts) > 2 || slicesContainsEmpty(parts) {
		return queries{}, invalid("table %q: want name or schema.name", c.table)
	}
	t := pgx.Identifier(parts).Sanitize()
	return queries{
		create: "CREATE TABLE IF NOT EXISTS " + t + ` (
			resource text PRIMARY KEY,
			fence bigint NOT NULL,
			updated_at timestamptz NOT NULL DEFAULT now())`,
		// Why a lower fence can never commit after a higher one: the row of
		// resource is locked by this statement until the transaction ends
		// (ON CONFLICT DO UPDATE locks the row whether or not its WHERE
		// holds), and the WHERE reads the row's latest committed version
		// once the lock is granted. A transaction that raised the row to F
		// commits before the next one of the resource passes this
		// statement, which then sees F and returns no row for a fence
		// below F. A new resource's INSERT is serialised by the primary
		// key likewise.
		record: "INSERT INTO " + t + ` AS f (resource, fence) VALUES ($1, $2)
			ON CONFLICT (resource) DO UPDATE SET fence = EXCLUDED.fence, updated_at = now()
			WHERE f.fence <= EXCLUDED.fence
			RETURNING f.fence`,
		highest: "SELECT fence FROM " + t + " WHERE resource = $1",
	}, nil
}

// checkResource refuses the names PostgreSQL cannot store as a record's
// key (see MaxResource); fence.Check has refused the empty one.
func checkResource(resource string) error {
	short := resource
	if len(short) > 64 {
		short = short[:64] + "..."
	}
	switch {
	case len(resource) > MaxResource:
		return invalid("resource %q: %d bytes, more than MaxResource (%d)", short, len(resource), MaxResource)
	case strings.IndexByte(resource, 0) >= 0:
		return invalid("resource %q: a NUL byte (PostgreSQL's text cannot hold one)", short)
	case !utf8.ValidString(resource):
		return invalid("resource %q: not valid UTF-8", short)
	}
	return nil
}

func slicesContainsEmpty(ss []string) bool {
	for _, s := range ss {
		if s == "" {
			return true
		}
	}
	return false
}

// New returns a Guard that keeps each resource's highest accepted fence in
// a table of its own, created if missing.
func New(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (*Guard, error) {
	if pool == nil {
		return nil, invalid("nil pool")
	}
	q, err := newQueries(opts)
	if err != nil {
		return nil, err
	}
	if err := create(func() error { _, err := pool.Exec(ctx, q.create); return err }); err != nil {
		return nil, err
	}
	return &Guard{pool: pool, q: q}, nil
}

// create runs a CREATE TABLE IF NOT EXISTS, again once if a concurrent
// one made the table meanwhile (PostgreSQL then reports a duplicate).
func create(run func() error) error {
	err := run()
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "23505" || pe.Code == "42P07") {
		err = run()
	}
	if err != nil {
		return fmt.Errorf("pgfence: create the fences' table: %w", err)
	}
	return nil
}

// Do runs fn in one transaction that commits only if t's fence is at least
// every fence already accepted for resource, and records it; otherwise it
// rolls back and returns an error matching fence.ErrStale (fn is not run).
// fn's own error rolls back too and is returned as is.
func (g *Guard) Do(ctx context.Context, t fence.Token, resource string, fn func(pgx.Tx) error) error {
	f, err := fence.Check(t, resource)
	if err != nil {
		return err
	}
	if err := checkResource(resource); err != nil {
		return err
	}
	if fn == nil {
		return invalid("nil fn")
	}
	tx, err := g.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgfence: begin: %w", err)
	}
	return guarded(ctx, g.q, f, resource, pgxTx{tx}, func() error { return fn(tx) })
}

// Fence returns the highest fence accepted for resource (0: none yet).
func (g *Guard) Fence(ctx context.Context, resource string) (int64, error) {
	if resource == "" {
		return 0, invalid("empty resource")
	}
	if err := checkResource(resource); err != nil {
		return 0, err
	}
	return highest(ctx, pgxRow(g.pool.QueryRow(ctx, g.q.highest, resource)), resource)
}

// SQLGuard is Guard for database/sql (pgx's stdlib, lib/pq, an ORM's
// *sql.DB): the same table, the same check.
type SQLGuard struct {
	db *sql.DB
	q  queries
}

// NewSQL returns a SQLGuard on db, creating the table if missing.
func NewSQL(ctx context.Context, db *sql.DB, opts ...Option) (*SQLGuard, error) {
	if db == nil {
		return nil, invalid("nil db")
	}
	q, err := newQueries(opts)
	if err != nil {
		return nil, err
	}
	if err := create(func() error { _, err := db.ExecContext(ctx, q.create); return err }); err != nil {
		return nil, err
	}
	return &SQLGuard{db: db, q: q}, nil
}

// Do is Guard.Do on a *sql.Tx.
func (g *SQLGuard) Do(ctx context.Context, t fence.Token, resource string, fn func(*sql.Tx) error) error {
	f, err := fence.Check(t, resource)
	if err != nil {
		return err
	}
	if err := checkResource(resource); err != nil {
		return err
	}
	if fn == nil {
		return invalid("nil fn")
	}
	tx, err := g.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("pgfence: begin: %w", err)
	}
	return guarded(ctx, g.q, f, resource, sqlTx{tx}, func() error { return fn(tx) })
}

// Fence is Guard.Fence.
func (g *SQLGuard) Fence(ctx context.Context, resource string) (int64, error) {
	if resource == "" {
		return 0, invalid("empty resource")
	}
	if err := checkResource(resource); err != nil {
		return 0, err
	}
	return highest(ctx, g.db.QueryRowContext(ctx, g.q.highest, resource), resource)
}

// txn is what guarded needs of a transaction of either library.
type txn interface {
	queryRow(ctx context.Context, q string, args ...any) row
	commit(ctx context.Context) error
	rollback(ctx context.Context) error
}

type row interface{ Scan(dest ...any) error }

// guarded records f for resource in tx, runs fn, and commits; it rolls back
// on a stale fence or any error, and when fn panics, before the panic goes
// on up (else the transaction stays open, idle, with the resource's row
// locked: every later Do of the resource waits, and the connection is
// never given back).
func guarded(ctx context.Context, q queries, f int64, resource string, tx txn, fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			_ = tx.rollback(ctx)
			panic(p)
		}
		if err != nil {
			// Within ctx: when it has ended, pgx closes the connection and
			// database/sql has rolled back already; either way the server
			// rolls the transaction back, and a stalled server does not
			// hold the caller.
			_ = tx.rollback(ctx)
		}
	}()
	var recorded int64
	err = tx.queryRow(ctx, q.record, resource, f).Scan(&recorded)
	if isNoRows(err) {
		h, herr := highest(ctx, tx.queryRow(ctx, q.highest, resource), resource)
		if herr != nil {
			return herr
		}
		return fmt.Errorf("%w: %q accepted fence %d, this write carries %d", fence.ErrStale, resource, h, f)
	}
	if err != nil {
		return fmt.Errorf("pgfence: record fence %d of %q: %w", f, resource, err)
	}
	if err := fn(); err != nil {
		return err
	}
	if err := tx.commit(ctx); err != nil {
		return fmt.Errorf("pgfence: commit: %w", err)
	}
	return nil
}

// highest reads a resource's record.
func highest(_ context.Context, r row, resource string) (int64, error) {
	var h int64
	err := r.Scan(&h)
	if isNoRows(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("pgfence: fence of %q: %w", resource, err)
	}
	return h, nil
}

func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) || errors.Is(err, sql.ErrNoRows) }

type pgxTx struct{ tx pgx.Tx }

func (t pgxTx) queryRow(ctx context.Context, q string, args ...any) row {
	return t.tx.QueryRow(ctx, q, args...)
}
func (t pgxTx) commit(ctx context.Context) error   { return t.tx.Commit(ctx) }
func (t pgxTx) rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }

func pgxRow(r pgx.Row) row { return r }

type sqlTx struct{ tx *sql.Tx }

func (t sqlTx) queryRow(ctx context.Context, q string, args ...any) row {
	return t.tx.QueryRowContext(ctx, q, args...)
}
func (t sqlTx) commit(context.Context) error   { return t.tx.Commit() }
func (t sqlTx) rollback(context.Context) error { return t.tx.Rollback() }

// invalid is an error matching fence.ErrInvalid.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: pgfence: %s", fence.ErrInvalid, fmt.Sprintf(format, args...))
}
