package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/pipeline"
	"github.com/sluice-rl/sluice/share"
)

// Target is the Redis a fleet run uses: addresses, and the servers the run
// started itself, which the fault scenarios may pause or kill.
type Target struct {
	// Addrs are the seeds every gateway connects to.
	Addrs []string
	// Standalone is a server the run started (pause scenario); nil if none.
	Standalone *redistest.Server
	// Cluster is a cluster the run started (outage scenario); nil if none.
	Cluster *redistest.Cluster
	// ClusterAddrs are the cluster's seeds, for scenarios that need it.
	ClusterAddrs []string
}

// FleetConfig configures a fleet run. Zero fields mean the defaults given.
type FleetConfig struct {
	Target Target
	// Gateways is how many virtual gateways share the traffic round-robin,
	// each with its own stack and Redis connections; zero means 4.
	Gateways int
	// Workers is how many goroutines issue requests; zero means 16.
	Workers int
	// Duration is how long each mode runs each scenario; zero means 5 s.
	Duration time.Duration
	// Rate is the requests a second offered; zero means 2000.
	Rate float64
	// Modes are compared on the same traffic; nil means every mode.
	Modes []Mode
	// Seed fixes the traffic; zero means 1.
	Seed uint64
	// Bins is how many points each timeline has; zero means 40.
	Bins int
	// Timeout bounds one decision, as the gateway's store timeout does;
	// zero means 1 s.
	Timeout time.Duration
	// Pipeline carries the stack's settings (guard, Redis credentials);
	// its Redis.Addrs, Gateways and NoLeases are set per run.
	Pipeline pipeline.Config
	// Progress receives a progress line while the run goes; nil discards.
	Progress io.Writer
	// MaxErrorRate is copied to the Report for Check.
	MaxErrorRate float64
}

func (c *FleetConfig) defaults() {
	c.Gateways = cmp.Or(c.Gateways, 4)
	c.Workers = cmp.Or(c.Workers, 16)
	c.Duration = cmp.Or(c.Duration, 5*time.Second)
	c.Rate = cmp.Or(c.Rate, 2000)
	c.Seed = cmp.Or(c.Seed, 1)
	c.Bins = cmp.Or(c.Bins, 40)
	c.Timeout = cmp.Or(c.Timeout, time.Second)
	if len(c.Modes) == 0 {
		c.Modes = Modes
	}
	c.Progress = cmp.Or(c.Progress, io.Discard)
}

// Loopback reports an error naming the first address that is not a
// loopback IP or "localhost": load is only sent to this machine unless the
// caller says otherwise.
func Loopback(addrs []string) error {
	for _, a := range addrs {
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			return fmt.Errorf("address %q: %w", a, err)
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return fmt.Errorf("address %q is not a loopback address: a fleet run sends load only to this machine unless --allow-remote is given", a)
		}
	}
	return nil
}

// CheckNeeds reports an error for the first scenario whose servers the
// target lacks.
func (t Target) CheckNeeds(scs []Scenario) error {
	for _, sc := range scs {
		switch {
		case sc.Needs == "standalone" && t.Standalone == nil:
			return fmt.Errorf("scenario %s pauses a Redis server, and only one this run started: use --local", sc.Name)
		case sc.Needs == "cluster" && t.Cluster == nil:
			return fmt.Errorf("scenario %s kills a cluster primary, and only one this run started: use --local", sc.Name)
		case sc.Needs == "" && len(t.Addrs) == 0:
			return fmt.Errorf("scenario %s: no Redis address", sc.Name)
		}
	}
	return nil
}

// RunFleet runs every scenario in every mode, one after another, and
// returns what it measured. Each run is bounded by cfg.Duration; ctx ends
// the whole early. Errors are a run that could not be set up (a stack
// that would not build, a fault that could not be done); failed requests
// are counted in the Report instead.
func RunFleet(ctx context.Context, cfg FleetConfig, scs []Scenario) (*Report, error) {
	cfg.defaults()
	if err := cfg.Target.CheckNeeds(scs); err != nil {
		return nil, err
	}
	rep := &Report{Started: time.Now().UTC(), Gateways: cfg.Gateways, Workers: cfg.Workers,
		Seconds: cfg.Duration.Seconds(), Rate: cfg.Rate, MaxErrorRate: cfg.MaxErrorRate}
	run := strconv.FormatInt(time.Now().UnixMilli()%1e8, 36)
	for _, sc := range scs {
		sr := ScenarioResult{Name: sc.Name, About: sc.About, Claim: sc.Claim}
		for i, mode := range cfg.Modes {
			prefix := fmt.Sprintf("%s%d-%s-", sc.Name, i, run)
			m, err := runPhase(ctx, cfg, sc, mode, prefix)
			if err != nil {
				return rep, fmt.Errorf("scenario %s, mode %s: %w", sc.Name, mode, err)
			}
			sr.Modes = append(sr.Modes, m)
			if ctx.Err() != nil {
				rep.Scenarios = append(rep.Scenarios, sr)
				return rep, ctx.Err()
			}
		}
		rep.Scenarios = append(rep.Scenarios, sr)
	}
	fmt.Fprintln(cfg.Progress)
	return rep, nil
}

// keyStat is one key's count and the exact limiter that says what it
// should have been.
type keyStat struct {
	mu                       sync.Mutex
	state                    limit.State
	now                      int64 // the latest request's time, Unix ms: the exact limiter's clock
	offered, admitted, exact int64
}

// phase is one mode's run of one scenario while it goes.
type phase struct {
	cfg    FleetConfig
	sc     Scenario
	t      *traffic
	stacks []*stack
	start  time.Time
	bin    time.Duration
	limits atomic.Pointer[[]limit.Limit] // each stream's limit now
	region atomic.Int32                  // the region whose gateways get the traffic (Scenario.Regions)
	keys   []keyStat

	// per bin, atomically
	focus, admitted, requests, local, errs, calls []atomic.Int64

	lastPoll time.Time // when calls were last read; pollCalls's, then runPhase's after it ends

	evMu   sync.Mutex
	events []EventMark // guarded by evMu
}

func (p *phase) binOf(t time.Time) int {
	return min(len(p.requests)-1, max(0, int(t.Sub(p.start)/p.bin)))
}

func (p *phase) mark(what string) {
	p.evMu.Lock()
	p.events = append(p.events, EventMark{At: math.Round(time.Since(p.start).Seconds()*100) / 100, What: what})
	p.evMu.Unlock()
}

// worker is what one request goroutine found.
type worker struct {
	lat         []time.Duration
	sources     map[string]int64
	errors      map[string]int64
	firstErrors map[string]string
}

func runPhase(ctx context.Context, cfg FleetConfig, sc Scenario, mode Mode, prefix string) (ModeResult, error) {
	t, err := newTraffic(sc, prefix)
	if err != nil {
		return ModeResult{}, err
	}
	addrs := cfg.Target.Addrs
	if sc.Needs == "cluster" {
		addrs = cfg.Target.ClusterAddrs
	} else if sc.Needs == "standalone" {
		addrs = []string{cfg.Target.Standalone.Addr()}
	}
	p := &phase{cfg: cfg, sc: sc, t: t, bin: max(cfg.Duration/time.Duration(cfg.Bins), 10*time.Millisecond), keys: make([]keyStat, len(t.keys))}
	bins := int((cfg.Duration + p.bin - 1) / p.bin)
	for _, s := range []*[]atomic.Int64{&p.focus, &p.admitted, &p.requests, &p.local, &p.errs, &p.calls} {
		*s = make([]atomic.Int64, bins)
	}
	lims := make([]limit.Limit, len(sc.Streams))
	for i, st := range sc.Streams {
		lims[i] = st.Limit
	}
	p.limits.Store(&lims)

	pcfg := cfg.Pipeline
	pcfg.Redis.Addrs = addrs
	pcfg.Fleet.Gateways = cfg.Gateways
	var w *world
	if n := len(sc.Regions); n > 0 {
		if cfg.Gateways < n {
			return ModeResult{}, fmt.Errorf("%d gateways for %d regions: want at least one a region", cfg.Gateways, n)
		}
		if w, err = startWorld(ctx, sc.Regions); err != nil {
			return ModeResult{}, err
		}
		defer w.close()
		pcfg.Fleet.Gateways = cfg.Gateways / n
		pcfg.Shares = &share.Config{Regions: n, Interval: regionInterval}
	}
	defer func() {
		for _, s := range p.stacks {
			s.close()
		}
	}()
	for g := range cfg.Gateways {
		gcfg := pcfg
		if w != nil {
			// Each region counts in a keyspace of its own, as it would in
			// a Redis of its own.
			gcfg.Redis.Prefix = "sl-" + sc.Regions[p.regionOf(g)] + ":"
		}
		s, err := newStack(ctx, gcfg, mode)
		if err != nil {
			return ModeResult{}, err
		}
		p.stacks = append(p.stacks, s)
		if s.redis != nil && !s.redis.Connected() {
			return ModeResult{}, fmt.Errorf("redis %v cannot be reached", addrs)
		}
		if w != nil {
			if err := w.attach(s.shares, sc.Regions[p.regionOf(g)], fmt.Sprintf("gw%d", g)); err != nil {
				return ModeResult{}, err
			}
		}
	}
	counter, err := newCallCounter(ctx, p.nodeAddrs(addrs), pcfg.Redis)
	if err != nil {
		return ModeResult{}, err
	}
	defer counter.close()

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	p.start = time.Now()
	deadline := p.start.Add(cfg.Duration)
	var bg sync.WaitGroup
	faultErr := make(chan error, 1)
	var restore func()
	bg.Go(func() {
		var err error
		restore, err = p.runEvents(runCtx)
		if err != nil {
			faultErr <- err
			cancel()
		}
	})
	bg.Go(func() { p.pollCalls(runCtx, counter, deadline) })
	bg.Go(func() { p.progress(runCtx, mode, deadline) })

	workers := make([]worker, cfg.Workers)
	var wg sync.WaitGroup
	for w := range cfg.Workers {
		wg.Go(func() { workers[w] = p.work(runCtx, w, mode, deadline) })
	}
	wg.Wait()
	elapsed := time.Since(p.start)
	cancel()
	bg.Wait()
	if restore != nil {
		restore()
	}
	select {
	case err := <-faultErr:
		return ModeResult{}, err
	default:
	}
	p.addCalls(ctx, counter)
	return p.result(mode, elapsed, workers), nil
}

// nodeAddrs is every node whose calls count: the cluster's, when the run
// started one, else what the first gateway sees.
func (p *phase) nodeAddrs(seeds []string) []string {
	if p.sc.Needs == "cluster" {
		return p.cfg.Target.Cluster.Addrs()
	}
	if s := p.stacks[0]; s.redis != nil {
		if n := s.redis.NodeAddrs(); len(n) > 0 {
			return n
		}
	}
	return seeds
}

// work issues the requests of one worker: request n (n = w, w+W, ...) is
// due at n/rate seconds and goes to gateway n mod G.
func (p *phase) work(ctx context.Context, w int, mode Mode, deadline time.Time) worker {
	r := worker{sources: map[string]int64{}, errors: map[string]int64{}, firstErrors: map[string]string{}}
	pick := p.t.picker(p.cfg.Seed, w)
	W, G := p.cfg.Workers, len(p.stacks)
	for n := w; ctx.Err() == nil; n += W {
		due := p.start.Add(time.Duration(float64(n) / p.t.rate * float64(time.Second)))
		if !due.Before(deadline) {
			break
		}
		if d := time.Until(due); d > 0 {
			select {
			case <-ctx.Done():
				return r
			case <-time.After(d):
			}
		}
		k := pick.next()
		lims := *p.limits.Load()
		req := limit.Request{Key: p.t.keys[k], Limits: lims[p.t.stream[k] : p.t.stream[k]+1]}
		tctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
		t0 := time.Now()
		d, err := p.stacks[p.gateway(n, G)].Take(tctx, &req)
		lat := time.Since(t0)
		cancel()
		if err != nil && ctx.Err() != nil {
			break // cut short by the end of the run
		}
		r.lat = append(r.lat, lat)
		b := p.binOf(t0)
		p.requests[b].Add(1)
		ks := &p.keys[k]
		ks.mu.Lock()
		// Requests reach this lock in the order their decisions came
		// back, not quite the order they were sent; the exact limiter
		// must never see time go backwards, which would refill a bucket
		// twice.
		ks.now = max(ks.now, t0.UnixMilli())
		o := limit.Evaluate(&req.Limits[0], &ks.state, ks.now, 1)
		if o.Allowed {
			ks.state = o.Next
			ks.exact++
		}
		ks.offered++
		if err == nil && d.Allowed {
			ks.admitted++
		}
		ks.mu.Unlock()
		if err != nil {
			kind := errorKind(err)
			r.errors[kind]++
			if _, ok := r.firstErrors[kind]; !ok {
				r.firstErrors[kind] = err.Error()
			}
			p.errs[b].Add(1)
			continue
		}
		src := cmp.Or(string(d.Source), "unknown")
		r.sources[src]++
		switch d.Source {
		case limit.FromLocalFallback, limit.FromFailClosed, limit.FromShed:
			p.local[b].Add(1)
		}
		if d.Allowed {
			p.admitted[b].Add(1)
			if k == 0 {
				p.focus[b].Add(1)
			}
		}
	}
	return r
}

// regionOf is the region of gateway g: the gateways are split evenly, in
// order.
func (p *phase) regionOf(g int) int {
	if len(p.sc.Regions) == 0 {
		return 0
	}
	return g / (p.cfg.Gateways / len(p.sc.Regions))
}

// gateway is the gateway request n goes to: round-robin over every
// gateway, or over the gateways of the region the traffic is in.
func (p *phase) gateway(n, G int) int {
	r := len(p.sc.Regions)
	if r == 0 {
		return n % G
	}
	per := G / r
	return int(p.region.Load())*per + n%per
}

// errorKind names an error's kind for the report's counts.
func errorKind(err error) string {
	switch {
	case errors.Is(err, guard.ErrShed):
		return "shed"
	case errors.Is(err, guard.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, limit.ErrBadReply):
		return "bad-reply"
	case errors.Is(err, limit.ErrInvalid):
		return "invalid"
	}
	return "other"
}

// progress writes a progress line every second until ctx ends.
func (p *phase) progress(ctx context.Context, mode Mode, deadline time.Time) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var req, adm, calls, errs int64
		for i := range p.requests {
			req += p.requests[i].Load()
			adm += p.admitted[i].Load()
			calls += p.calls[i].Load()
			errs += p.errs[i].Load()
		}
		el := time.Since(p.start).Seconds()
		fmt.Fprintf(p.cfg.Progress, "\r%-8s %-13s %5.1f/%.0fs %9d requests %7.0f/s admitted %5.1f%% calls/request %.3f errors %d   ",
			p.sc.Name, mode, el, p.cfg.Duration.Seconds(), req, float64(req)/el, pct(adm, req), ratio(calls, req), errs)
	}
}

func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// runEvents does the scenario's events at their times and returns what
// undoes them (resumes a paused server, restarts a killed node) for after
// the run.
func (p *phase) runEvents(ctx context.Context) (restore func(), err error) {
	var undo []func()
	restore = func() {
		for _, u := range slices.Backward(undo) {
			u()
		}
	}
	for _, ev := range p.sc.Events {
		at := p.start.Add(time.Duration(ev.At * float64(p.cfg.Duration)))
		select {
		case <-ctx.Done():
			return restore, nil
		case <-time.After(time.Until(at)):
		}
		switch ev.Kind {
		case PauseRedis:
			s := p.cfg.Target.Standalone
			if err := s.Stop(); err != nil {
				return restore, err
			}
			undo = append(undo, func() { _ = s.Cont() })
			p.mark("redis paused (SIGSTOP)")
		case ResumeRedis:
			if err := p.cfg.Target.Standalone.Cont(); err != nil {
				return restore, err
			}
			p.mark("redis resumed (SIGCONT)")
		case KillPrimary:
			c := p.cfg.Target.Cluster
			addr := p.stacks[0].redis.Node(p.t.keys[0])
			i := slices.IndexFunc(c.Nodes(), func(s *redistest.Server) bool { return s.Addr() == addr })
			if i < 0 {
				return restore, fmt.Errorf("kill primary: the focus key's node %s is not one of the cluster's", addr)
			}
			n := c.Nodes()[i]
			if err := c.Kill(ctx, n); err != nil {
				return restore, fmt.Errorf("kill primary %s: %w", addr, err)
			}
			p.mark("primary " + addr + " killed")
			undo = append(undo, func() {
				wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_, _ = c.WaitFailover(wctx, n)
				if n.Restart() == nil {
					_ = c.WaitHealthy(wctx)
				}
			})
			if nn, err := c.WaitFailover(ctx, n); err == nil && nn != nil {
				p.mark("failed over to " + nn.Addr())
			}
		case MoveTraffic:
			p.region.Store(int32(ev.To))
			to := p.sc.Regions[ev.To]
			p.mark("traffic moved to " + to)
			p.watchShare(ctx, ev.To)
		case LowerLimit:
			old := *p.limits.Load()
			lims := slices.Clone(old)
			for i := range lims {
				lims[i].Count = max(1, lims[i].Count/ev.Factor)
				lims[i].Burst = max(1, lims[i].Burst/ev.Factor)
			}
			p.limits.Store(&lims)
			p.mark(fmt.Sprintf("limit lowered from %d to %d a second", old[0].Count, lims[0].Count))
		}
	}
	return restore, nil
}

// watchShare marks when the first gateway of region r holds most of the
// focus key's limit (the balancer has moved the share after the traffic),
// checking every 10 ms until ctx ends.
func (p *phase) watchShare(ctx context.Context, r int) {
	s := p.stacks[r*(p.cfg.Gateways/len(p.sc.Regions))].shares
	name := p.sc.Streams[0].Limit.Name
	for ctx.Err() == nil {
		if got := s.Share(p.t.keys[0], name); got > share.Whole/2 {
			p.mark(fmt.Sprintf("%s holds %.0f%% of the limit", p.sc.Regions[r], 100*float64(got)/share.Whole))
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// pollCalls reads the script calls Redis ran once a bin.
func (p *phase) pollCalls(ctx context.Context, c *callCounter, deadline time.Time) {
	tick := time.NewTicker(p.bin)
	defer tick.Stop()
	p.lastPoll = p.start
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			p.addCalls(ctx, c)
		}
	}
}

// addCalls reads the calls since the last read and puts them in the bin
// of the middle of that interval: a tick late under load must not move
// one bin's calls into the next.
func (p *phase) addCalls(ctx context.Context, c *callCounter) {
	now := time.Now()
	n, _ := c.read(ctx)
	p.calls[p.binOf(p.lastPoll.Add(now.Sub(p.lastPoll)/2))].Add(n)
	p.lastPoll = now
}

// result gathers the run's figures.
func (p *phase) result(mode Mode, elapsed time.Duration, ws []worker) ModeResult {
	m := ModeResult{Mode: mode, Seconds: elapsed.Seconds(), Offered: p.t.rate,
		Sources: map[string]int64{}, Errors: map[string]int64{}, FirstErrors: map[string]string{}}
	var lat []time.Duration
	for _, w := range ws {
		lat = append(lat, w.lat...)
		for k, v := range w.sources {
			m.Sources[k] += v
		}
		for k, v := range w.errors {
			m.Errors[k] += v
		}
		for k, v := range w.firstErrors {
			if _, ok := m.FirstErrors[k]; !ok {
				m.FirstErrors[k] = v
			}
		}
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		at := func(q float64) float64 {
			return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))]) / 1e3
		}
		m.P50us, m.P99us, m.P999us, m.MaxUs = at(0.5), at(0.99), at(0.999), float64(lat[len(lat)-1])/1e3
	}
	var over, under int64
	order := make([]int, len(p.keys))
	for i := range p.keys {
		ks := &p.keys[i]
		m.Requests += ks.offered
		m.Admitted += ks.admitted
		m.Exact += ks.exact
		over += max(0, ks.admitted-ks.exact)
		under += max(0, ks.exact-ks.admitted)
		order[i] = i
	}
	slices.SortStableFunc(order[1:], func(a, b int) int { return cmp.Compare(p.keys[b].offered, p.keys[a].offered) })
	final := *p.limits.Load()
	for _, i := range order[:min(len(order), 10)] {
		ks := &p.keys[i]
		kr := KeyResult{Key: p.t.keys[i], Limit: final[p.t.stream[i]].String(), Offered: ks.offered, Admitted: ks.admitted, Exact: ks.exact}
		if ks.exact > 0 {
			kr.OverPct = round2(100 * float64(ks.admitted-ks.exact) / float64(ks.exact))
		}
		m.Keys = append(m.Keys, kr)
	}
	m.Throughput = float64(m.Requests) / max(elapsed.Seconds(), 1e-9)
	for i := range p.calls {
		m.RedisCalls += p.calls[i].Load()
	}
	m.CallsPerRequest = ratio(m.RedisCalls, m.Requests)
	m.Timeline = p.timeline()
	m.Events = p.events
	m.Window = p.window(m.Timeline)
	m.OverPct, m.UnderPct = round2(pct(over, m.Exact)), round2(pct(under, m.Exact))
	return m
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }

func (p *phase) timeline() Timeline {
	sec := p.bin.Seconds()
	rate := func(s []atomic.Int64) []float64 {
		out := make([]float64, len(s))
		for i := range s {
			out[i] = round2(float64(s[i].Load()) / sec)
		}
		return out
	}
	tl := Timeline{BinSeconds: sec, FocusAdmitted: rate(p.focus), Admitted: rate(p.admitted), Requests: rate(p.requests),
		Calls: rate(p.calls), Local: rate(p.local), Errors: rate(p.errs)}
	// The focus limit as it stood in each bin: lowered from the event on.
	l0 := p.sc.Streams[0].Limit
	tl.FocusLimit = make([]float64, len(p.requests))
	for i := range tl.FocusLimit {
		l := l0
		for _, ev := range p.sc.Events {
			if ev.Kind == LowerLimit && float64(i)*sec >= ev.At*p.cfg.Duration.Seconds() {
				l.Count = max(1, l.Count/ev.Factor)
			}
		}
		tl.FocusLimit[i] = round2(float64(l.Count) / l.Period.Seconds())
	}
	return tl
}

// window measures the focus key between the first event and the next (or
// the end of the run): its admitted rate against its limit while the
// fault or the new rule held. Bins partly outside are left out.
func (p *phase) window(tl Timeline) *Window {
	if len(p.events) == 0 {
		return nil
	}
	w := &Window{From: p.events[0].At, To: p.cfg.Duration.Seconds(), What: p.events[0].What}
	if len(p.events) > 1 {
		w.To = p.events[1].At
	}
	var adm, lim float64
	for i := range tl.FocusAdmitted {
		from := float64(i) * tl.BinSeconds
		if from >= w.From && from+tl.BinSeconds <= w.To {
			adm += tl.FocusAdmitted[i]
			lim += tl.FocusLimit[i]
		}
	}
	if lim > 0 {
		w.Ratio = round2(adm / lim)
	}
	return w
}
