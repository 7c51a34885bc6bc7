package balancersvc

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/internal/balancer"
	"github.com/sluice-rl/sluice/internal/longpoll"
	"github.com/sluice-rl/sluice/share"
)

// Config configures a Server. Regions is required; the zero value of every
// other field means its default.
type Config struct {
	// CoreConfig is how shares are decided. Its DownAfter, zero, means
	// three Intervals here; it is also how long a standby waits for its
	// primary.
	balancer.CoreConfig
	// Interval is how often shares are recomputed; gateways should report
	// as often. Zero means 10 seconds.
	Interval time.Duration
	// MaxWait bounds how long a poll is held. Zero means 30 seconds.
	MaxWait time.Duration
	// Primary, if set, makes this server a standby of the balancer at that
	// base URL: it answers gateways with 503 while the primary's /healthz
	// answers, and takes over once the primary has failed to answer for
	// DownAfter; it steps back when the primary answers again.
	Primary string
	// Token is the fleet token: a bearer token good for every call under
	// /v1 (ReportPath and SharesPath of every region, KeyPath), as before
	// there were Tokens. Its holder can report for any region and move
	// any key's shares; give gateways their region's token from Tokens
	// instead, and keep Token only while they move to them. /healthz
	// stays open. New refuses a balancer with neither Token nor Tokens
	// unless TrustedNetwork is set.
	Token string
	// Tokens are the per-region, per-gateway and operators' credentials
	// (see Token).
	Tokens []Token
	// TrustedNetwork serves /v1 without a token: only for a network where
	// nothing but gateways and operators reaches the balancer. It has no
	// effect when Token or Tokens is set.
	TrustedNetwork bool
	// HTTPClient checks the primary. Nil means a client with a timeout of
	// one interval.
	HTTPClient *http.Client
	// Now returns the current time. Nil means time.Now.
	Now func() time.Time
	// Logger receives the balancer's log. Nil discards it.
	Logger *slog.Logger
	// Registerer receives the balancer's metrics. Nil registers none.
	Registerer prometheus.Registerer
}

// Token is one credential the balancer accepts, as a bearer token.
type Token struct {
	// Name identifies the holder in the log.
	Name string `yaml:"name"`
	// Secret is the token itself: at least 16 bytes.
	Secret string `yaml:"secret"`
	// Region is the one region the token reports and polls for. Empty
	// makes it an operator's token, which reads KeyPath and nothing else.
	Region string `yaml:"region,omitempty"`
	// Gateway, if set, is the one gateway ID the token reports as (with
	// Region). Without it, the token reports as any gateway of Region.
	Gateway string `yaml:"gateway,omitempty"`
}

// credential is a Token as the server checks it: its secret hashed, so
// that comparisons take the same time whatever the lengths.
type credential struct {
	name    string
	sum     [32]byte
	region  string // "" for an operator's token
	gateway string // "" for any gateway of region
	fleet   bool   // Config.Token, or the trusted network: every region
}

// trusted is the credential of every call when the balancer has none
// (Config.TrustedNetwork).
var trusted = &credential{name: "trusted-network", fleet: true}

// checkTokens reports the first thing wrong with cfg's credentials.
func checkTokens(cfg *Config) error {
	seen := map[string]string{}
	if cfg.Token != "" {
		seen[cfg.Token] = "the fleet token"
	}
	for i, t := range cfg.Tokens {
		switch {
		case t.Name == "" || strings.ContainsAny(t.Name, " \t\n"):
			return fmt.Errorf("balancer: tokens[%d]: name %q is empty or holds spaces", i, t.Name)
		case len(t.Secret) < 16:
			return fmt.Errorf("balancer: token %s: secret is %d bytes, want at least 16", t.Name, len(t.Secret))
		case seen[t.Secret] != "":
			return fmt.Errorf("balancer: token %s: its secret is also %s's", t.Name, seen[t.Secret])
		case t.Region != "" && !slices.Contains(cfg.Regions, t.Region):
			return fmt.Errorf("balancer: token %s: region %q is not one of %v", t.Name, t.Region, cfg.Regions)
		case t.Gateway != "" && t.Region == "":
			return fmt.Errorf("balancer: token %s: gateway %q without a region", t.Name, t.Gateway)
		}
		seen[t.Secret] = "token " + t.Name
	}
	return nil
}

// Server is the quota balancer: it takes reports, recomputes shares every
// interval and answers gateways' polls. Make one with New. Its methods are
// safe for concurrent use; Run must be running for shares to change.
type Server struct {
	cfg     Config
	log     *slog.Logger
	active  atomic.Bool  // false while a standby's primary answers
	since   atomic.Int64 // Unix nanoseconds since which it has been active (or since New)
	metrics *metrics
	creds   []*credential // empty: every call is trusted
	stopped chan struct{} // closed when Run returns: held polls answer at once
	stop    sync.Once

	logMu      sync.Mutex
	lastLogged map[string]time.Time // guarded by logMu: when each reason was last logged

	mu      sync.Mutex
	core    *balancer.Core // guarded by mu
	cur     *published     // guarded by mu; nil until the first rebalance after the warm-up
	changed chan struct{}  // guarded by mu; closed and replaced when cur changes
}

// published is one version of every region's shares.
type published struct {
	version int64
	plan    *balancer.Plan
	bodies  map[string][]byte // region → its balancer.Shares as JSON
}

// New returns a Server for cfg.
func New(cfg Config) (*Server, error) {
	cfg.Interval = cmp.Or(cfg.Interval, 10*time.Second)
	cfg.DownAfter = cmp.Or(cfg.DownAfter, 3*cfg.Interval)
	cfg.MaxWait = cmp.Or(cfg.MaxWait, 30*time.Second)
	if cfg.Interval < 0 || cfg.MaxWait < 0 {
		return nil, fmt.Errorf("balancer: interval %v and max wait %v must be positive", cfg.Interval, cfg.MaxWait)
	}
	if cfg.Token == "" && len(cfg.Tokens) == 0 && !cfg.TrustedNetwork {
		return nil, errors.New("balancer: no token: anyone who reaches the balancer could read the API keys it balances and move their shares; " +
			"set one, or TrustedNetwork if only gateways reach it")
	}
	if err := checkTokens(&cfg); err != nil {
		return nil, err
	}
	if cfg.Primary != "" {
		if _, err := longpoll.ParseURL(cfg.Primary); err != nil {
			return nil, fmt.Errorf("balancer: primary %w", err)
		}
		cfg.Primary = strings.TrimSuffix(cfg.Primary, "/")
	}
	core, err := balancer.NewCore(cfg.CoreConfig)
	if err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	cfg.HTTPClient = cmp.Or(cfg.HTTPClient, &http.Client{Timeout: cfg.Interval})
	s := &Server{cfg: cfg, log: cfg.Logger, core: core, changed: make(chan struct{}), stopped: make(chan struct{}),
		lastLogged: map[string]time.Time{}}
	if cfg.Token != "" {
		s.creds = append(s.creds, &credential{name: "fleet", sum: sha256.Sum256([]byte(cfg.Token)), fleet: true})
	}
	for _, t := range cfg.Tokens {
		s.creds = append(s.creds, &credential{name: t.Name, sum: sha256.Sum256([]byte(t.Secret)), region: t.Region, gateway: t.Gateway})
	}
	s.active.Store(cfg.Primary == "")
	s.since.Store(cfg.Now().UnixNano())
	if s.metrics, err = newMetrics(cfg.Regions, cfg.Registerer); err != nil {
		return nil, err
	}
	return s, nil
}

// Run recomputes the shares every interval until ctx is done. A standby
// also watches its primary. It returns nil when ctx is done, and then the
// polls it holds answer at once, so that a shutdown need not wait them out.
func (s *Server) Run(ctx context.Context) error {
	defer s.stop.Do(func() { close(s.stopped) })
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	var primaryDown time.Time // when the primary first failed to answer; zero while it answers
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if s.cfg.Primary != "" {
			primaryDown = s.watchPrimary(ctx, primaryDown)
		}
		s.Rebalance()
	}
}

// watchPrimary checks the primary once and switches this standby on or
// off, returning when the primary first failed (zero if it answered).
func (s *Server) watchPrimary(ctx context.Context, down time.Time) time.Time {
	now := s.cfg.Now()
	if s.primaryAnswers(ctx) {
		if s.active.CompareAndSwap(true, false) {
			// Its shares would be stale by its next takeover.
			s.mu.Lock()
			s.cur = nil
			s.mu.Unlock()
			s.log.Info("primary balancer answers again; standing by", "primary", s.cfg.Primary)
		}
		return time.Time{}
	}
	if down.IsZero() {
		down = now
	}
	if now.Sub(down) >= s.cfg.DownAfter && !s.active.Load() {
		s.since.Store(now.UnixNano())
		s.active.Store(true)
		s.log.Warn("primary balancer does not answer; taking over", "primary", s.cfg.Primary, "since", down)
	}
	return down
}

func (s *Server) primaryAnswers(ctx context.Context) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.cfg.Primary+"/healthz", nil)
	if err != nil {
		return false
	}
	resp, err := s.cfg.HTTPClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Rebalance recomputes the shares now and publishes them if they changed.
// Until DownAfter has passed since New (or since a standby took over), it
// only gathers reports: a balancer that has just started has not heard
// from every region yet, and would count the quiet ones as down.
func (s *Server) Rebalance() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rebalanceLocked()
}

// rebalanceLocked is Rebalance with s.mu held.
func (s *Server) rebalanceLocked() {
	start := time.Now()
	now := s.cfg.Now()
	plan := s.core.Rebalance(now)
	defer func() { s.metrics.rebalanced(plan, time.Since(start)) }()
	s.metrics.stateBytes.Set(float64(s.core.StateBytes()))
	if plan == nil || now.Sub(time.Unix(0, s.since.Load())) < s.cfg.DownAfter || !s.active.Load() {
		return
	}
	bodies := map[string][]byte{}
	var version int64 = 1
	if s.cur != nil {
		version = s.cur.version + 1
	}
	// A restarted balancer, or a standby taking over, continues above any
	// version its predecessor gave out, as long as clocks roughly agree.
	version = max(version, now.UnixMilli())
	for i, r := range plan.Regions {
		sh := balancer.Shares{Version: version, Region: r, Default: plan.Defaults[i]}
		for k, pp := range plan.Pairs {
			sh.Shares = append(sh.Shares, balancer.PairShare{Key: k.Key, Limit: k.Limit, Share: pp.Shares[i]})
		}
		slices.SortFunc(sh.Shares, func(a, b balancer.PairShare) int {
			return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Limit, b.Limit))
		})
		body, err := json.Marshal(sh)
		if err != nil {
			s.log.Error("shares not encoded", "region", r, "err", err)
			return
		}
		bodies[r] = body
	}
	if s.cur != nil && sameShares(s.cur.plan, plan) {
		s.cur.plan = plan // fresher demand figures, same shares: no new version
		return
	}
	s.cur = &published{version: version, plan: plan, bodies: bodies}
	close(s.changed)
	s.changed = make(chan struct{})
	s.metrics.version.Set(float64(version))
}

// sameShares reports whether two plans give every region the same shares.
func sameShares(a, b *balancer.Plan) bool {
	return slices.Equal(a.Defaults, b.Defaults) &&
		maps.EqualFunc(a.Pairs, b.Pairs, func(x, y *balancer.PairPlan) bool { return slices.Equal(x.Shares, y.Shares) })
}

// Handler returns the balancer's HTTP API: ReportPath, SharesPath,
// KeyPath and /healthz.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+balancer.ReportPath, s.authorized(s.serveReport))
	mux.HandleFunc("GET "+balancer.SharesPath, s.authorized(s.serveShares))
	mux.HandleFunc("GET "+balancer.KeyPath+"{key...}", s.authorized(s.serveKey))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if !s.active.Load() {
			http.Error(w, "standby", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	})
	return mux
}

// Reasons the server refuses a call, besides the Core's (ReasonInvalid,
// ReasonClock, ReasonGateways): values of the metrics' reason label.
const (
	ReasonToken   = "token"   // 401: no bearer token, or an unknown one
	ReasonRegion  = "region"  // 403: the token is another region's (or an operator's)
	ReasonGateway = "gateway" // 403: the token is another gateway's
	ReasonSize    = "size"    // 413: the body is above balancer.MaxReportBytes
)

// authorized passes a call to h with its credential, or refuses it (401)
// without a known bearer token, unless the server has no credentials
// (TrustedNetwork).
func (s *Server) authorized(h func(http.ResponseWriter, *http.Request, *credential)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if len(s.creds) == 0 {
			h(w, r, trusted)
			return
		}
		c := s.credential(r)
		if c == nil {
			s.refuse(w, r, http.StatusUnauthorized, "", ReasonToken, errors.New("missing or unknown bearer token"))
			return
		}
		if c.fleet {
			s.metrics.fleetCalls.Inc()
		}
		h(w, r, c)
	}
}

// credential returns the credential whose secret a request's bearer token
// is, or nil. It compares with every one, so the time taken does not say
// which nearly matched. The scheme is case-insensitive (RFC 9110, section
// 11.1), as the rules service has it.
func (s *Server) credential(r *http.Request) *credential {
	auth := r.Header.Get("Authorization")
	if len(auth) < 7 || !strings.EqualFold(auth[:7], "Bearer ") {
		return nil
	}
	secret := strings.TrimLeft(auth[7:], " ")
	if secret == "" {
		return nil
	}
	sum := sha256.Sum256([]byte(secret))
	var found *credential
	for _, c := range s.creds {
		if subtle.ConstantTimeCompare(sum[:], c.sum[:]) == 1 {
			found = c
		}
	}
	return found
}

// mayUse reports why c may not act for region (and gateway, if not
// empty), or nil if it may.
func (c *credential) mayUse(region, gateway string) error {
	switch {
	case c.fleet:
		return nil
	case c.region == "":
		return fmt.Errorf("token %s is an operator's: it reads %s only", c.name, balancer.KeyPath)
	case c.region != region:
		return fmt.Errorf("token %s is region %q's, not %q's", c.name, c.region, region)
	case gateway != "" && c.gateway != "" && c.gateway != gateway:
		return fmt.Errorf("token %s is gateway %q's, not %q's", c.name, c.gateway, gateway)
	}
	return nil
}

// refuse answers a refused call, counts it by region and reason, and logs
// it (at most once a second per reason, so that a flood of them does not
// flood the log).
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, status int, region, reason string, err error) {
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", "Bearer")
	}
	fail(w, status, err)
	if !slices.Contains(s.cfg.Regions, region) {
		region = "unknown"
	}
	s.metrics.refusals.WithLabelValues(region, reason).Inc()
	if s.sampled("refused " + reason) {
		s.log.Warn("balancer call refused", "reason", reason, "region", region, "path", r.URL.Path, "remote", r.RemoteAddr,
			"status", status, "err", err)
	}
}

// sampled reports whether a log line of kind may be written now: at most
// one a second of each.
func (s *Server) sampled(kind string) bool {
	now := time.Now()
	s.logMu.Lock()
	defer s.logMu.Unlock()
	if now.Sub(s.lastLogged[kind]) < time.Second {
		return false
	}
	s.lastLogged[kind] = now
	return true
}

// fail writes an error answer.
func fail(w http.ResponseWriter, status int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(struct {
		Error string `json:"error"`
	}{err.Error()})
}

// errNoShares answers a call for shares before the first rebalance after
// the warm-up.
var errNoShares = errors.New("shares: none yet: the balancer is gathering its first reports")

// errStandby answers gateways while a standby's primary answers, with
// StandbyHeader set.
var errStandby = errors.New("standby balancer: the primary answers; ask it")

// standby answers a gateway's call to a standby.
func standby(w http.ResponseWriter) {
	w.Header().Set(balancer.StandbyHeader, "1")
	fail(w, http.StatusServiceUnavailable, errStandby)
}

func (s *Server) serveReport(w http.ResponseWriter, r *http.Request, c *credential) {
	if !s.active.Load() {
		standby(w)
		return
	}
	var rep balancer.Report
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, balancer.MaxReportBytes)).Decode(&rep); err != nil {
		if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
			s.refuse(w, r, http.StatusRequestEntityTooLarge, c.region, ReasonSize, fmt.Errorf("report: body is larger than %d bytes", tooBig.Limit))
			return
		}
		s.refuse(w, r, http.StatusBadRequest, c.region, balancer.ReasonInvalid, fmt.Errorf("report: decode: %w", err))
		return
	}
	if err := c.mayUse(rep.Region, rep.Gateway); err != nil {
		reason := ReasonRegion
		if c.region != "" && c.region == rep.Region {
			reason = ReasonGateway
		}
		s.refuse(w, r, http.StatusForbidden, c.region, reason, fmt.Errorf("report from %q of region %q: %w", rep.Gateway, rep.Region, err))
		return
	}
	s.mu.Lock()
	tk, err := s.core.Report(s.cfg.Now(), rep)
	if err == nil && s.cur != nil && !s.cur.plan.Up[slices.Index(s.cfg.Regions, rep.Region)] {
		// A region that was counted down is back: rebalance now, so that
		// its gateways, whose polls are held while it is down, get its
		// shares at once rather than an interval later.
		s.rebalanceLocked()
	}
	state := s.core.StateBytes()
	s.mu.Unlock()
	if err != nil {
		reason := balancer.ReasonInvalid
		if re := (*balancer.RefusedError)(nil); errors.As(err, &re) {
			reason = re.Reason
		}
		s.refuse(w, r, http.StatusBadRequest, rep.Region, reason, err)
		return
	}
	s.metrics.report(rep.Region, tk, state)
	if len(tk.Clamped) > 0 && s.sampled("clamped") {
		s.log.Warn("balancer report clamped to what one gateway can have seen", "region", rep.Region, "gateway", rep.Gateway,
			"bounds", tk.Clamped, "total", rep.Total, "span_ms", rep.SpanMillis, "max_gateway_rate", s.core.Config().MaxGatewayRate, "token", c.name)
	}
	if tk.Evicted > 0 && s.sampled("evicted") {
		s.log.Warn("balancer state at its bound: the least busy pairs dropped", "evicted", tk.Evicted, "state_bytes", state,
			"max_state_bytes", s.core.Config().MaxStateBytes)
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) serveShares(w http.ResponseWriter, r *http.Request, c *credential) {
	q := r.URL.Query()
	region := q.Get("region")
	if !slices.Contains(s.cfg.Regions, region) {
		fail(w, http.StatusBadRequest, fmt.Errorf("shares: unknown region %q (want one of %v)", region, s.cfg.Regions))
		return
	}
	if err := c.mayUse(region, ""); err != nil {
		s.refuse(w, r, http.StatusForbidden, c.region, ReasonRegion, fmt.Errorf("shares of region %q: %w", region, err))
		return
	}
	after, err := strconv.ParseInt(cmp.Or(q.Get("after"), "0"), 10, 64)
	if err != nil {
		fail(w, http.StatusBadRequest, fmt.Errorf("shares: after %q: want a version number", q.Get("after")))
		return
	}
	wait := time.Duration(0)
	if v := q.Get("wait"); v != "" {
		if wait, err = time.ParseDuration(v); err != nil || wait < 0 {
			fail(w, http.StatusBadRequest, fmt.Errorf("shares: wait %q: want a duration such as 25s", v))
			return
		}
	}
	wait = min(wait, s.cfg.MaxWait)
	if !s.active.Load() {
		standby(w)
		return
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		cur, changed := s.cur, s.changed
		// A region counted down has no shares in cur (every one is 0):
		// its gateways keep what they have until its report brings it
		// back.
		down := cur != nil && !cur.plan.Up[slices.Index(s.cfg.Regions, region)]
		s.mu.Unlock()
		if cur != nil && cur.version != after && !down {
			w.Header().Set("Content-Type", "application/json")
			w.Write(cur.bodies[region])
			return
		}
		// Nothing new, nothing yet while the balancer gathers its first
		// reports, or the region is down: hold the poll, so shares reach
		// the gateway the moment they exist.
		select {
		case <-changed:
			continue
		case <-timer.C:
		case <-r.Context().Done():
			return
		case <-s.stopped:
		}
		if cur == nil || down {
			err := errNoShares
			if down {
				err = fmt.Errorf("shares: region %q is counted down until its gateways report; keep the shares in force", region)
			}
			w.Header().Set("Retry-After", strconv.Itoa(max(1, int(s.cfg.Interval.Seconds()))))
			fail(w, http.StatusServiceUnavailable, err)
			return
		}
		w.WriteHeader(http.StatusNotModified)
		return
	}
}

func (s *Server) serveKey(w http.ResponseWriter, r *http.Request, c *credential) {
	if !c.fleet && c.region != "" {
		// A key's shares name every region's demand for a raw API key:
		// an operator's business, not one region's gateways'.
		s.refuse(w, r, http.StatusForbidden, c.region, ReasonRegion, fmt.Errorf("token %s is region %q's: %s needs an operator's token", c.name, c.region, balancer.KeyPath))
		return
	}
	key := r.PathValue("key")
	// Rebalance swaps a published plan for a fresher one in place, under
	// mu: read it there.
	s.mu.Lock()
	cur := s.cur
	var plan *balancer.Plan
	var version int64
	if cur != nil {
		plan, version = cur.plan, cur.version
	}
	s.mu.Unlock()
	if cur == nil {
		fail(w, http.StatusServiceUnavailable, errNoShares)
		return
	}
	ks := balancer.KeyShares{Key: key, Version: version, Defaults: map[string]balancer.RegionShare{}, Up: map[string]bool{}}
	for i, reg := range plan.Regions {
		ks.Up[reg] = plan.Up[i]
		ks.Defaults[reg] = regionShare(plan.Defaults[i], plan.Totals[i])
	}
	for k, pp := range plan.Pairs {
		if k.Key != key {
			continue
		}
		if ks.Limits == nil {
			ks.Limits = map[string]map[string]balancer.RegionShare{}
		}
		m := map[string]balancer.RegionShare{}
		for i, reg := range plan.Regions {
			m[reg] = regionShare(pp.Shares[i], pp.Demand[i])
		}
		ks.Limits[k.Limit] = m
	}
	ks.Balanced = ks.Limits != nil
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(ks)
}

func regionShare(sh uint32, demand float64) balancer.RegionShare {
	return balancer.RegionShare{Share: sh, Fraction: float64(sh) / share.Whole, Demand: demand}
}
