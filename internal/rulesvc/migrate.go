package rulesvc

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrateLock is the advisory lock that replicas starting at once take
// around migrations, so only one applies each.
const migrateLock = 0x736c75696365 // "sluice"

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// migration is one numbered SQL file.
type migration struct {
	n    int
	name string
	sql  string
}

func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var out []migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		n, err := strconv.Atoi(num)
		if !ok || err != nil || n <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a positive number and _", e.Name())
		}
		b, err := migrationFiles.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		out = append(out, migration{n: n, name: e.Name(), sql: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].n < out[j].n })
	for i := 1; i < len(out); i++ {
		if out[i].n == out[i-1].n {
			return nil, fmt.Errorf("migrations %s and %s share number %d", out[i-1].name, out[i].name, out[i].n)
		}
	}
	return out, nil
}

// openPool connects to PostgreSQL with every connection's search_path set to
// schema, creates the schema and applies the migrations it lacks.
func openPool(ctx context.Context, dsn, schema string) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres DSN: %w", err)
	}
	pc.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	if err := migrate(ctx, pc.ConnConfig, schema); err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres pool: %w", err)
	}
	return pool, nil
}

// migrate runs on its own connection, closed at the end, so the session's
// advisory lock can never outlive it.
func migrate(ctx context.Context, cc *pgx.ConnConfig, schema string) (err error) {
	ms, err := migrations()
	if err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("postgres connect: %w", err)
	}
	defer func() {
		if cerr := conn.Close(context.WithoutCancel(ctx)); cerr != nil && err == nil {
			err = fmt.Errorf("postgres close: %w", cerr)
		}
	}()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrateLock); err != nil {
		return fmt.Errorf("migrate: take lock: %w", err)
	}
	for _, s := range []string{
		"CREATE SCHEMA IF NOT EXISTS " + pgx.Identifier{schema}.Sanitize(),
		`CREATE TABLE IF NOT EXISTS schema_migrations (
			version int PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
	} {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("migrate schema %s: %w", schema, err)
		}
	}
	for _, m := range ms {
		var done bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)", m.n).Scan(&done); err != nil {
			return fmt.Errorf("migrate: read applied: %w", err)
		}
		if done {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", m.n, m.name)
			return err
		})
		if err != nil {
			return fmt.Errorf("migration %s in schema %s: %w", m.name, schema, err)
		}
	}
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return ensureFirstSnapshot(ctx, tx) }); err != nil {
		return fmt.Errorf("migrate: first snapshot: %w", err)
	}
	return nil
}

// ensureFirstSnapshot gives a new database version 1, the empty rule set,
// so gateways always have something to load.
func ensureFirstSnapshot(ctx context.Context, tx pgx.Tx) error {
	var n int
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM snapshots").Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	b, err := build(ctx, tx)
	if err != nil {
		return err
	}
	v, err := b.insert(ctx, tx)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO rollouts (version, state, decided_at, reason) VALUES ($1, 'promoted', now(), 'first snapshot')`, v)
	return err
}

func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }
