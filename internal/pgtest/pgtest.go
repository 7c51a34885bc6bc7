// Package pgtest gives tests their PostgreSQL: the test database's DSN and a
// fresh schema per test, dropped when the test ends. scripts/test starts
// the server; a test without it fails, never skips.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultDSN is the test database when $SLUICE_TEST_POSTGRES is unset:
// PostgreSQL on the loopback, database test, trust authentication.
const DefaultDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// DSN returns $SLUICE_TEST_POSTGRES, or DefaultDSN.
func DSN() string {
	if dsn := os.Getenv("SLUICE_TEST_POSTGRES"); dsn != "" {
		return dsn
	}
	return DefaultDSN
}

// Schema returns the name of a fresh schema for one test, prefix and random
// hex, which the code under test creates; the test's cleanup drops it. It
// fails the test at once if the database cannot be reached.
func Schema(t testing.TB, prefix string) string {
	t.Helper()
	b := make([]byte, 6)
	rand.Read(b)
	schema := prefix + hex.EncodeToString(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, DSN())
	if err != nil {
		t.Fatalf("PostgreSQL at %s is needed (scripts/test starts it): %v", DSN(), err)
	}
	conn.Close(ctx)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, DSN())
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return schema
}
