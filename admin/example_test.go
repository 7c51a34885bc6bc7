package admin_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/internal/pgtest"
	"github.com/sluice-rl/sluice/internal/rulesvc"
	"github.com/sluice-rl/sluice/rules"
)

// An operator applies a rule set as code, then sets an emergency override
// of one noisy key.
func Example() {
	base, stop, err := startService()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	ctx := context.Background()
	c := &admin.Client{BaseURL: base, Token: "write-token-0123456789"}

	doc := rules.Document{
		Keys: map[string]rules.KeyInfo{"key_8f3": {Plan: "pro"}},
		Rules: []rules.Rule{
			{Scope: rules.ScopeDefault, Limits: []rules.Limit{{Name: "s", Rate: 10, Per: rules.Duration(time.Second)}}},
			{Scope: rules.ScopePlan, Match: rules.Match{Plan: "pro"}, Limits: []rules.Limit{{Name: "s", Rate: 100, Per: rules.Duration(time.Second)}}},
		},
	}
	dry, err := c.ApplyRuleSet(ctx, doc, true)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, ch := range dry.Changes {
		fmt.Println("would", ch.Op, ch.Kind, ch.Name)
	}
	applied, err := c.ApplyRuleSet(ctx, doc, false)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("version", applied.Snapshot.Version, applied.Snapshot.Rollout)

	_, err = c.SetOverride(ctx, "key_noisy", admin.Override{
		Limits:    []rules.Limit{{Name: "s", Rate: 1, Per: rules.Duration(time.Second)}},
		ExpiresAt: time.Now().Add(2 * time.Hour),
	})
	fmt.Println(err)
	// Output:
	// would add rule default
	// would add rule plan plan=pro
	// would add key key_8f3
	// version 2 promoted
	// rules service: 400 Bad Request: reason: is required: say why this key is overridden
}

// startService runs a rules service over a fresh schema of the test
// database and returns its URL and what stops it and drops the schema.
func startService() (string, func(), error) {
	b := make([]byte, 6)
	rand.Read(b)
	schema := "sluice_example_" + hex.EncodeToString(b)
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := rulesvc.New(ctx, rulesvc.Config{Postgres: pgtest.DSN(), Schema: schema, Logger: slog.New(slog.DiscardHandler),
		Tokens: []rulesvc.Token{{Name: "ops", Secret: "write-token-0123456789", Role: rulesvc.RoleWrite}}, TrustedNetwork: true})
	if err != nil {
		cancel()
		return "", nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		svc.Run(ctx)
	}()
	srv := httptest.NewServer(svc.Handler())
	return srv.URL, func() {
		cancel()
		<-done
		srv.Close()
		svc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, pgtest.DSN()); err == nil {
			_, _ = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			conn.Close(ctx)
		}
	}, nil
}
