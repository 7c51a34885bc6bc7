package rulesvc_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-rl/sluice/internal/proctest"
	"github.com/sluice-rl/sluice/internal/rulesvc"
	"github.com/sluice-rl/sluice/internal/rulesync"
	"github.com/sluice-rl/sluice/rules"
)

// TestExplainRegionKeepsBalancerText: a balancer (or a proxy before it)
// that refuses in plain text has its text in explain's 502, not only the
// status.
func TestExplainRegionKeepsBalancerText(t *testing.T) {
	bal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "balancer-0 is draining", http.StatusServiceUnavailable)
	}))
	t.Cleanup(bal.Close)
	r := startReplica(t, newSchema(t), rulesvc.Config{Canary: rulesvc.Canary{Disabled: true}, Balancer: &rulesvc.BalancerShares{URL: bal.URL}})
	mustCall(t, r.srv.URL, "POST", "/admin/v1/rules", rules.Rule{Scope: rules.ScopeDefault,
		Limits: []rules.Limit{{Name: "s", Rate: 100, Per: rules.Duration(time.Second)}}}, 201, nil)
	if code, raw := call(t, r.srv.URL, readToken, "GET", "/admin/v1/explain?key=key_a&path=/v1/x&region=eu", nil, nil); code != 502 || !strings.Contains(raw, "draining") {
		t.Errorf("got %d %s, want 502 with the balancer's text", code, raw)
	}
}

// TestRolloutLoggedOnceDecided: a canary decision the database refuses (a
// trigger here) is rolled back, and the log does not say it was promoted:
// operators alert on that line.
func TestRolloutLoggedOnceDecided(t *testing.T) {
	schema, logs := newSchema(t), &proctest.Buffer{}
	r := startReplica(t, schema, rulesvc.Config{Refresh: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Canary: rulesvc.Canary{Window: time.Second, MinSample: 1000, Check: 100 * time.Millisecond}})
	conn, err := pgx.Connect(context.Background(), postgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	s := pgx.Identifier{schema}.Sanitize()
	if _, err := conn.Exec(context.Background(), `CREATE FUNCTION `+s+`.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused by test'; END $$;
		CREATE TRIGGER refuse BEFORE UPDATE ON `+s+`.rollouts FOR EACH ROW WHEN (NEW.state <> OLD.state) EXECUTE FUNCTION `+s+`.refuse()`); err != nil {
		t.Fatal(err)
	}
	firstRules(t, r.srv.URL)
	startClient(t, r.srv.URL, "gw-1", "eu", rulesync.Config{})
	waitFleet(t, r.srv.URL, 1)
	mustCall(t, r.srv.URL, "POST", "/admin/v1/rules", map[string]any{"scope": "default", "limits": []map[string]any{{"name": "s", "rate": 10, "per": "1s"}}}, 201, nil)
	eventually(t, 10*time.Second, "a refused decision", func() bool { return strings.Contains(logs.String(), "refused by test") })
	if strings.Contains(logs.String(), "canary promoted without comparison") {
		t.Errorf("log says promoted, but the decision was rolled back:\n%s", logs.String())
	}
}
