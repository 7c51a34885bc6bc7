package pgtest_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-rl/sluice/internal/pgtest"
)

// TestSchemaIsDropped creates the schema a subtest got, as the code under
// test would, and checks that the subtest's cleanup dropped it.
func TestSchemaIsDropped(t *testing.T) {
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, pgtest.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	exists := func(schema string) bool {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1", schema).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	var schema string
	t.Run("uses", func(t *testing.T) {
		schema = pgtest.Schema(t, "pgtest_")
		if !strings.HasPrefix(schema, "pgtest_") || len(schema) != len("pgtest_")+12 {
			t.Errorf("schema %q: want pgtest_ and 12 hex digits", schema)
		}
		if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
			t.Fatal(err)
		}
		if !exists(schema) {
			t.Fatalf("schema %s not created", schema)
		}
	})
	if exists(schema) {
		t.Errorf("schema %s still exists after the test that got it ended", schema)
	}
}
