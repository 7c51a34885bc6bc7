// Package rulesvc is the rules service: it keeps rules, the key directory
// and endpoints in PostgreSQL, compiles them into immutable versioned
// snapshots, and hands each gateway the snapshot it should run through a
// long poll.
//
// Every change is one transaction that compiles the whole would-be rule set
// with rules.Compile, so a rule that does not compile never reaches the
// table; the same transaction writes the snapshot, its rollout and an audit
// row, and NOTIFYs every replica, which then wakes its waiting gateways.
// A new version first goes to a canary of about one gateway in a hundred;
// it is promoted after the canary window (4 s by default, so that a change
// reaches every gateway within 10 s) unless the canary's refusal rate
// rises above the rest's, which halts it. Each gateway weighs at most one
// full sample in that comparison, and a report counting more than a
// gateway can serve is refused, so made-up gateways cannot decide it.
// Emergency overrides, and the first rules of a fleet that enforces none,
// skip the canary.
//
// Several replicas may run over one database: all state lives there, and
// PostgreSQL's NOTIFY tells each replica when it changed.
package rulesvc

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/internal/rulesapi"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/rules"
)

// notifyChannel is the PostgreSQL channel every change is announced on. The
// payload is the schema, so services in different schemas of one database
// ignore each other.
const notifyChannel = "sluice_rules"

// Config configures a Service. The zero value of every field but Postgres
// means its default.
type Config struct {
	// Postgres is the database's connection string. Required.
	Postgres string
	// Schema holds the service's tables; it is created and migrated on
	// start. Empty means "sluice".
	Schema string
	// Tokens are the bearer tokens the API accepts. New refuses a
	// configuration without a token of RoleGateway unless TrustedNetwork
	// is set.
	Tokens []Token
	// TrustedNetwork serves the gateway endpoints (/v1) without a token
	// when no token of RoleGateway is configured: for a network where only
	// gateways reach the service. Anyone who reaches /v1 then reads the
	// snapshot, key directory included, and counts in the fleet.
	TrustedNetwork bool
	// MaxGateways is how many gateways may be registered at once under one
	// gateway token that does not set its own Token.MaxGateways, and under
	// the trusted network. Zero means 256.
	MaxGateways int
	// GatewayRetention is how long a gateway that stopped polling is kept
	// in the gateways table, for the admin API's fleet view, before it is
	// dropped. Zero means 1 hour; it must be at least GatewayTTL.
	GatewayRetention time.Duration
	// MaxGatewayRate is the most requests a second one gateway can
	// plausibly decide: a report counting more requests than this rate
	// over the time since the gateway's previous report (at least a
	// second) is refused, so no gateway can claim traffic it could not
	// have served. Zero means 100,000, twenty times what one gateway node
	// handles in the reference design.
	MaxGatewayRate float64
	// ReportRate is how many reports a second one gateway may send, on
	// average, with bursts of five; a report beyond it is refused with
	// 429. Zero means 1.
	ReportRate float64
	// ShadowRawKeys stores the API keys and addresses of shadow reports as
	// the gateways send them. By default they are stored hashed, as
	// keyhash.Of writes them, the form of the gateway's decision log.
	ShadowRawKeys bool
	// MaxOverride is the longest an emergency override may last. Zero
	// means 7 days.
	MaxOverride time.Duration
	// PollTimeout is the longest a gateway's long poll is held before a
	// 304. Zero means 25 seconds.
	PollTimeout time.Duration
	// GatewayTTL is how long after its last poll a gateway still counts
	// as subscribed. Zero means 90 seconds; it must exceed PollTimeout.
	GatewayTTL time.Duration
	// Refresh is how often each replica rereads the state even without a
	// NOTIFY, and recounts the fleet. Zero means 5 seconds.
	Refresh time.Duration
	// Canary configures the rollout of new versions.
	Canary Canary
	// ReportRetention is how long gateways' reports are kept. Zero means
	// 7 days.
	ReportRetention time.Duration
	// Counts reads the gateways' quota counters for GET
	// /admin/v1/usage/{key} (a redisstore.Store on the gateways' Redis).
	// Nil answers that endpoint with 501.
	Counts CountReader
	// Store, if set, is read by GET /admin/v1/explain for a key's state
	// of each limit, never taken from (admin.ExplainInput.Store): the
	// gateways' Redis, given with --redis. Nil leaves the state out.
	Store limit.Store
	// Share, if set, gives explain this region's share of a limit for a
	// store key. Nil means the service does not know the shares, and
	// explain shows none.
	Share func(storeKey, limitName string) (limit.Fraction, bool)
	// Balancer, if set, is where explain reads a key's region shares when
	// asked with ?region= (--balancer-url, $SLUICE_BALANCER_TOKEN). It
	// takes precedence over Share for such a question.
	Balancer *BalancerShares
	// Registerer receives the service's metrics. Nil means none.
	Registerer prometheus.Registerer
	// Logger receives the service's log. Nil means slog.Default().
	Logger *slog.Logger
}

// Canary configures how a new snapshot version is tried before it goes to
// every gateway.
type Canary struct {
	// Disabled sends every version to every gateway at once.
	Disabled bool
	// Fraction of the subscribed gateways that get a new version first;
	// at least one is chosen. Zero means 0.01.
	Fraction float64
	// Window is how long the canary runs before the version is promoted.
	// Zero means 4 seconds: with the check, the promotion's NOTIFY and the
	// gateways' long polls, a change reaches every gateway within the
	// 10 s the design promises, with room for a refresh that catches a
	// lost NOTIFY. Canary gateways report every second meanwhile.
	Window time.Duration
	// Threshold is how much higher the canary's refusal rate may be than
	// the rest's, as a fraction of requests, before the rollout halts.
	// Zero means 0.05.
	Threshold float64
	// MinSample is how many requests each side must have reported before
	// their rates are compared, and the most one gateway's requests weigh
	// in its side's rate. Zero means 200: against the default threshold of
	// 0.05 that is about three standard errors at a 5% refusal rate.
	MinSample int64
	// MaxWait is how long past Window a canary without enough samples for
	// a comparison keeps running, waiting for them, before it is promoted
	// without comparison. It is not waited when the fleet has fewer than
	// MinGateways gateways, or none beside the canaries: waiting cannot
	// help. Zero means 30 seconds; negative means no wait.
	MaxWait time.Duration
	// MinGateways is how many distinct gateways, both sides together, must
	// have reported before the rates are compared. Zero means 3.
	MinGateways int
	// Check is how often a running canary is evaluated. Zero means a
	// twentieth of Window, between 100 ms and 5 s.
	Check time.Duration
}

func (c *Config) setDefaults() error {
	if c.Postgres == "" {
		return errors.New("rulesvc: Postgres connection string is empty")
	}
	c.MaxOverride = cmp.Or(c.MaxOverride, 7*24*time.Hour)
	c.PollTimeout = cmp.Or(c.PollTimeout, 25*time.Second)
	c.GatewayTTL = cmp.Or(c.GatewayTTL, 90*time.Second)
	c.Refresh = cmp.Or(c.Refresh, 5*time.Second)
	c.ReportRetention = cmp.Or(c.ReportRetention, 7*24*time.Hour)
	c.GatewayRetention = cmp.Or(c.GatewayRetention, time.Hour)
	c.MaxGateways = cmp.Or(c.MaxGateways, 256)
	c.ReportRate = cmp.Or(c.ReportRate, 1)
	c.MaxGatewayRate = cmp.Or(c.MaxGatewayRate, 100_000)
	c.Canary.Window = cmp.Or(c.Canary.Window, 4*time.Second)
	c.Canary.Check = cmp.Or(c.Canary.Check, min(max(c.Canary.Window/20, 100*time.Millisecond), 5*time.Second))
	c.Schema = cmp.Or(c.Schema, "sluice")
	c.Canary.Fraction = cmp.Or(c.Canary.Fraction, 0.01)
	c.Canary.Threshold = cmp.Or(c.Canary.Threshold, 0.05)
	c.Canary.MinSample = cmp.Or(c.Canary.MinSample, 200)
	c.Canary.MaxWait = max(cmp.Or(c.Canary.MaxWait, 30*time.Second), 0)
	c.Canary.MinGateways = cmp.Or(c.Canary.MinGateways, 3)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	switch {
	case !schemaName.MatchString(c.Schema):
		return fmt.Errorf("rulesvc: schema %q: want lower-case letters, digits and _, at most 63", c.Schema)
	case c.MaxOverride < 0, c.PollTimeout < 0, c.GatewayTTL < 0, c.Refresh < 0, c.ReportRetention < 0,
		c.Canary.Window < 0, c.Canary.Check < 0:
		return errors.New("rulesvc: durations must not be negative")
	case c.GatewayTTL <= c.PollTimeout:
		return fmt.Errorf("rulesvc: gateway TTL %v must exceed the poll timeout %v", c.GatewayTTL, c.PollTimeout)
	case c.GatewayRetention < c.GatewayTTL:
		return fmt.Errorf("rulesvc: gateway retention %v is shorter than the gateway TTL %v", c.GatewayRetention, c.GatewayTTL)
	case c.MaxGateways < 0:
		return fmt.Errorf("rulesvc: MaxGateways %d is negative", c.MaxGateways)
	case c.ReportRate < 0 || math.IsNaN(c.ReportRate) || math.IsInf(c.ReportRate, 0):
		return fmt.Errorf("rulesvc: report rate %v is not a positive number", c.ReportRate)
	case c.Canary.Fraction < 0 || c.Canary.Fraction > 1:
		return fmt.Errorf("rulesvc: canary fraction %v is not between 0 and 1", c.Canary.Fraction)
	case c.Canary.Threshold < 0 || c.Canary.Threshold > 1:
		return fmt.Errorf("rulesvc: canary threshold %v is not between 0 and 1", c.Canary.Threshold)
	case c.Canary.MinSample < 0:
		return fmt.Errorf("rulesvc: canary minimum sample %d is negative", c.Canary.MinSample)
	case c.Canary.MinGateways < 0:
		return fmt.Errorf("rulesvc: canary minimum gateways %d is negative", c.Canary.MinGateways)
	case c.MaxGatewayRate < 0 || math.IsNaN(c.MaxGatewayRate) || math.IsInf(c.MaxGatewayRate, 0):
		return fmt.Errorf("rulesvc: max gateway rate %v is not a positive number", c.MaxGatewayRate)
	}
	if err := checkTokens(c.Tokens); err != nil {
		return err
	}
	if !c.TrustedNetwork && !slices.ContainsFunc(c.Tokens, func(t Token) bool { return t.Role == RoleGateway }) {
		return errors.New("rulesvc: no gateway token is configured, so /v1 (snapshots, the key directory, reports) " +
			"would be open to anyone who reaches it: add a token of role gateway, or declare the network trusted " +
			"(Config.TrustedNetwork, --trusted-network) if only gateways can reach the service")
	}
	return nil
}

// Service is one replica of the rules service. Its methods are safe for
// concurrent use. Build it with New, serve Handler, and keep Run running:
// Run is what notices changes made through other replicas, runs the canary
// and counts the fleet.
type Service struct {
	cfg     Config
	pool    *pgxpool.Pool
	log     *slog.Logger
	tokens  []token
	gwOpen  bool // no gateway token configured
	metrics *metrics

	state atomic.Pointer[state]

	// reloading serializes reloads, so an older read never replaces a
	// newer one; it is held across database queries, mu never is.
	reloading sync.Mutex
	mu        sync.Mutex
	changed   chan struct{} // closed when state changes, then replaced; guarded by mu

	stopped chan struct{} // closed by stop, when Run returns: waiting polls give up
	stop    func()

	refusals *refusals // the busiest refused keys the gateways reported
}

// state is what one replica serves; it is replaced whole.
type state struct {
	stable   *snap
	canary   *snap // nil when no canary runs
	canaries map[string]bool
	halted   int64 // newest halted version above stable; 0 for none
	// withdrawn are the canary versions above stable that were halted or
	// superseded: a gateway holding one is sent back with Rollback set.
	withdrawn map[int64]bool
	fleet     rulesapi.Fleet
}

// snap is one stored snapshot.
type snap struct {
	version int64
	hash    string
	doc     json.RawMessage
	// set compiles doc once, for explain and usage: a question compiles
	// the set once per version rather than once per call.
	set func() (*rules.Set, error)
}

// New connects to PostgreSQL, creates or migrates the schema (several
// replicas may start at once) and loads the current state. The caller
// must Close the Service.
func New(ctx context.Context, cfg Config) (*Service, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	pool, err := openPool(ctx, cfg.Postgres, cfg.Schema)
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, pool: pool, log: cfg.Logger, metrics: m,
		changed: make(chan struct{}), stopped: make(chan struct{}), refusals: newRefusals()}
	s.stop = sync.OnceFunc(func() { close(s.stopped) })
	s.tokens = compileTokens(cfg.Tokens, cfg.MaxGateways)
	s.gwOpen = !slices.ContainsFunc(s.tokens, func(t token) bool { return t.role == RoleGateway })
	s.state.Store(&state{})
	if s.gwOpen {
		s.log.Warn("rules service: no gateway token; /v1 is open to anyone on the network, which is declared trusted",
			"max_gateways", cfg.MaxGateways)
	}
	for _, t := range s.tokens {
		if t.role == RoleGateway {
			s.log.Info("rules service: gateway token", "name", t.name, "max_gateways", t.maxGateways)
		}
	}
	if err := s.reload(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// Close releases the database pool and ends any waiting long polls. Call it
// after Run has returned and the HTTP server has stopped.
func (s *Service) Close() {
	s.stop()
	s.pool.Close()
}

// Handler serves the admin API under /admin/v1, the operator console under
// /ui (package console), the gateway endpoints under
// /v1 and the health check at /healthz.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	s.adminRoutes(mux)
	mux.Handle("GET "+rulesapi.SnapshotPath, s.authorized(RoleGateway, s.serveSnapshot))
	mux.Handle("POST "+rulesapi.ReportPath, s.authorized(RoleGateway, s.serveReport))
	s.consoleRoutes(mux)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := s.pool.Ping(r.Context()); err != nil {
			writeError(w, &apiError{status: http.StatusServiceUnavailable, msg: "database unreachable"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"version": s.state.Load().stable.version})
	})
	return mux
}

// Run follows changes until ctx ends: it LISTENs for other replicas'
// changes, rereads the state every Refresh, evaluates the running canary
// and prunes old reports. It returns nil when ctx ends, and ends waiting
// long polls with 503 so gateways move to another replica.
func (s *Service) Run(ctx context.Context) error {
	defer s.stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { s.listen(ctx) })
	wg.Go(func() { s.every(ctx, s.cfg.Refresh, s.refresh) })
	if !s.cfg.Canary.Disabled {
		wg.Go(func() { s.every(ctx, s.cfg.Canary.Check, s.evaluate) })
	}
	<-ctx.Done()
	return nil
}

func (s *Service) every(ctx context.Context, d time.Duration, f func(context.Context) error) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := f(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("rules service: periodic task failed", "err", err)
			}
		}
	}
}

// refresh prunes what is past its retention, and reloads.
func (s *Service) refresh(ctx context.Context) error {
	for _, p := range []struct {
		table, column string
		keep          time.Duration
	}{{"decisions", "at", s.cfg.ReportRetention}, {"shadow_hits", "at", s.cfg.ReportRetention}, {"gateways", "last_seen", s.cfg.GatewayRetention}} {
		if _, err := s.pool.Exec(ctx, "DELETE FROM "+p.table+" WHERE "+p.column+" < now() - make_interval(secs => $1)",
			p.keep.Seconds()); err != nil {
			return fmt.Errorf("prune %s: %w", p.table, err)
		}
	}
	return s.reload(ctx)
}

// listen holds a dedicated connection LISTENing for changes, reconnecting
// with backoff when it breaks; after each (re)connect it rereads the state,
// since notifications sent while it was away are lost.
func (s *Service) listen(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := s.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("rules service: LISTEN connection lost; reconnecting", "err", err, "retry_in_ms", backoff.Milliseconds())
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (s *Service) listenOnce(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		return err
	}
	if err := s.reload(ctx); err != nil {
		return err
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if n.Payload != s.cfg.Schema {
			continue
		}
		if err := s.reload(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("rules service: reload after NOTIFY failed", "err", err)
		}
	}
}

// notify announces a change to every replica when tx commits.
func (s *Service) notify(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, "SELECT pg_notify($1, $2)", notifyChannel, s.cfg.Schema)
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	return nil
}

// dbTimeout bounds the service's own database work, so a database that
// hangs cannot hold up the polls answered from memory.
const dbTimeout = 10 * time.Second

// reload rereads what gateways should run and the fleet, and wakes the
// waiting polls if any of it changed. Concurrent reloads are serialized.
func (s *Service) reload(ctx context.Context) error {
	s.reloading.Lock()
	defer s.reloading.Unlock()
	ctx, cancel := context.WithTimeout(ctx, dbTimeout)
	defer cancel()
	old := s.state.Load()
	next := &state{canaries: map[string]bool{}}

	var stableV int64
	err := s.pool.QueryRow(ctx, `SELECT max(version) FROM rollouts WHERE state = 'promoted'`).Scan(&stableV)
	if err != nil {
		return fmt.Errorf("read stable version: %w", err)
	}
	if next.stable, err = s.snapshot(ctx, stableV, old); err != nil {
		return err
	}
	var canaryV int64
	var canaries []string
	err = s.pool.QueryRow(ctx, `SELECT version, canaries FROM rollouts WHERE state = 'canary'
		ORDER BY version DESC LIMIT 1`).Scan(&canaryV, &canaries)
	switch {
	case isNoRows(err):
	case err != nil:
		return fmt.Errorf("read canary: %w", err)
	default:
		if next.canary, err = s.snapshot(ctx, canaryV, old); err != nil {
			return err
		}
		for _, g := range canaries {
			next.canaries[g] = true
		}
	}
	next.withdrawn = map[int64]bool{}
	var v int64
	var halted bool
	err = forEach(ctx, s.pool, "withdrawn rollouts", []any{&v, &halted}, func() error {
		next.withdrawn[v] = true
		if halted {
			next.halted = max(next.halted, v)
		}
		return nil
	}, `SELECT version, state = 'halted' FROM rollouts WHERE state IN ('halted', 'superseded') AND version > $1`, stableV)
	if err != nil {
		return err
	}
	if next.fleet, err = s.countFleet(ctx); err != nil {
		return err
	}
	s.metrics.observe(next)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state.Store(next)
	if !sameState(old, next) {
		close(s.changed)
		s.changed = make(chan struct{})
	}
	return nil
}

// snapshot returns version v, from old when it already holds it.
func (s *Service) snapshot(ctx context.Context, v int64, old *state) (*snap, error) {
	for _, o := range []*snap{old.stable, old.canary} {
		if o != nil && o.version == v {
			return o, nil
		}
	}
	sn := &snap{version: v}
	err := s.pool.QueryRow(ctx, "SELECT hash, document FROM snapshots WHERE version = $1", v).Scan(&sn.hash, &sn.doc)
	if err != nil {
		return nil, fmt.Errorf("read snapshot %d: %w", v, err)
	}
	sn.set = sync.OnceValues(func() (*rules.Set, error) {
		var doc rules.Document
		if err := json.Unmarshal(sn.doc, &doc); err != nil {
			return nil, fmt.Errorf("decode snapshot %d: %w", v, err)
		}
		set, err := rules.Compile(doc, v)
		if err != nil {
			return nil, fmt.Errorf("compile snapshot %d: %w", v, err)
		}
		return set, nil
	})
	return sn, nil
}

// liveGateways selects the gateways that count in the fleet and may be
// canaries: those that polled and reported within the gateway TTL ($1, in
// seconds). A gateway that only polls, as one made up by a holder of a
// gateway token might, counts for nothing.
const liveGateways = `last_seen > now() - make_interval(secs => $1) AND last_report > now() - make_interval(secs => $1)`

func (s *Service) countFleet(ctx context.Context) (rulesapi.Fleet, error) {
	f := rulesapi.Fleet{Regions: map[string]int{}}
	var region string
	var n int
	err := forEach(ctx, s.pool, "fleet", []any{&region, &n}, func() error {
		f.Total += n
		f.Regions[region] = n
		return nil
	}, `SELECT region, count(*) FROM gateways WHERE `+liveGateways+` GROUP BY region`, s.cfg.GatewayTTL.Seconds())
	return f, err
}

// ver is sn's version; 0 for none.
func (sn *snap) ver() int64 {
	if sn == nil {
		return 0
	}
	return sn.version
}

func sameState(a, b *state) bool {
	return a.stable.ver() == b.stable.ver() && a.canary.ver() == b.canary.ver() && len(a.withdrawn) == len(b.withdrawn) &&
		maps.Equal(a.canaries, b.canaries) && a.fleet.Total == b.fleet.Total && maps.Equal(a.fleet.Regions, b.fleet.Regions)
}

// waitChange returns a channel closed at the next change of state.
func (s *Service) waitChange() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}
