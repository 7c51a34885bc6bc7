package rulesync

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/internal/keyhash"
	"github.com/sluice-rl/sluice/internal/longpoll"
	"github.com/sluice-rl/sluice/internal/rulesapi"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/rules"
)

// maxShadowKeys bounds the distinct keys counted per rule in one report
// interval, so a flood of distinct keys cannot grow the gateway's memory.
const maxShadowKeys = 1000

// counts accumulates decisions between reports.
type counts struct {
	cur atomic.Pointer[versionCount] // the version most requests are under

	mu       sync.Mutex
	versions map[int64]*versionCount   // guarded by mu
	shadow   map[shadowID]*shadowCount // guarded by mu
}

type versionCount struct {
	version           int64
	requests, refused atomic.Int64
}

// shadowID names a rule version's counts: of a shadow rule's would-be
// refusals, or with refused set of an enforced rule's refusals.
type shadowID struct {
	version, rule int64
	refused       bool
}

type shadowCount struct {
	total int64
	keys  map[string]int64
	limit string // the limit that refused last, for an enforced rule
}

// Record counts one decision made under snapshot version: refused is true
// when an enforced limit refused the request. It is cheap enough for every
// request: two atomic adds when the version is the current one.
func (c *Client) Record(version int64, refused bool) {
	vc := c.counts.cur.Load()
	if vc == nil || vc.version != version {
		vc = c.counts.forVersion(version)
	}
	vc.requests.Add(1)
	if refused {
		vc.refused.Add(1)
	}
}

func (cs *counts) forVersion(version int64) *versionCount {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	vc := cs.versions[version]
	if vc == nil {
		vc = &versionCount{version: version}
		cs.versions[version] = vc
	}
	if cur := cs.cur.Load(); cur == nil || version >= cur.version {
		cs.cur.Store(vc)
	}
	return vc
}

// RecordShadow counts a request that shadow rule ruleID of snapshot
// version would have refused, and whose it was: key is the store key, "k:"
// and the API key or "ip:" and the client address.
func (c *Client) RecordShadow(version, ruleID int64, key string) {
	c.counts.addShadow(shadowID{version: version, rule: ruleID}, key, "", 1)
}

// RecordRefusal counts a request enforced rule ruleID of snapshot version
// refused, by its limit named lim, and whose it was (the store key). The
// report carries the keys hashed (keyhash.Of), never raw.
func (c *Client) RecordRefusal(version, ruleID int64, lim, key string) {
	c.counts.addShadow(shadowID{version: version, rule: ruleID, refused: true}, key, lim, 1)
}

// addShadow counts n would-be refusals (or refusals) of key, by the limit
// named lim when it is not empty; the key "" counts only in the total.
func (cs *counts) addShadow(id shadowID, key, lim string, n int64) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	sc := cs.shadow[id]
	if sc == nil {
		sc = &shadowCount{keys: map[string]int64{}}
		cs.shadow[id] = sc
	}
	sc.total += n
	if lim != "" {
		sc.limit = lim
	}
	if _, ok := sc.keys[key]; key != "" && (ok || len(sc.keys) < maxShadowKeys) {
		sc.keys[key] += n
	}
}

// take empties the counts into a report.
func (cs *counts) take() []rulesapi.VersionReport {
	cs.mu.Lock()
	shadow := cs.shadow
	cs.shadow = map[shadowID]*shadowCount{}
	byVersion := map[int64]*rulesapi.VersionReport{}
	for v, vc := range cs.versions {
		// Refused first: a request counted between the two swaps then
		// lands in this report's requests and the next one's refusals,
		// which the clamp below keeps consistent.
		ref := vc.refused.Swap(0)
		req := vc.requests.Swap(0)
		if req == 0 && ref == 0 && vc != cs.cur.Load() {
			delete(cs.versions, v)
			continue
		}
		byVersion[v] = &rulesapi.VersionReport{Version: v, Requests: req, Refused: min(ref, req)}
	}
	cs.mu.Unlock()
	for id, sc := range shadow {
		vr := byVersion[id.version]
		if vr == nil {
			vr = &rulesapi.VersionReport{Version: id.version}
			byVersion[id.version] = vr
		}
		top := topOf(sc.keys)
		if id.refused {
			for i := range top {
				top[i].Key = keyhash.Of(top[i].Key)
			}
			vr.Refusals = append(vr.Refusals, rulesapi.RefusalReport{Rule: id.rule, Limit: sc.limit, Refused: sc.total, TopKeys: top})
			continue
		}
		vr.Shadow = append(vr.Shadow, rulesapi.ShadowReport{Rule: id.rule, WouldRefuse: sc.total, TopKeys: top})
	}
	var out []rulesapi.VersionReport
	for _, vr := range byVersion {
		if vr.Requests > 0 || len(vr.Shadow) > 0 {
			slices.SortFunc(vr.Shadow, func(a, b rulesapi.ShadowReport) int { return int(a.Rule - b.Rule) })
			slices.SortFunc(vr.Refusals, func(a, b rulesapi.RefusalReport) int { return int(a.Rule - b.Rule) })
			// A version's refusals by rule cannot add up to more than its
			// refused requests, which the service checks: the two are
			// counted apart, and a refusal counted while a report is taken
			// can land in the next report's rules but this one's total.
			budget := vr.Refused
			for i := range vr.Refusals {
				rr := &vr.Refusals[i]
				rr.Refused = min(rr.Refused, budget)
				budget -= rr.Refused
				clampTop(rr.TopKeys, rr.Refused)
			}
			out = append(out, *vr)
		}
	}
	slices.SortFunc(out, func(a, b rulesapi.VersionReport) int { return int(b.Version - a.Version) })
	return out[:min(len(out), rulesapi.MaxReportVersions)]
}

// putBack returns the counts of a report that could not be sent, so the
// next one carries them.
func (c *Client) putBack(vrs []rulesapi.VersionReport) {
	for _, vr := range vrs {
		vc := c.counts.forVersion(vr.Version)
		vc.requests.Add(vr.Requests)
		vc.refused.Add(vr.Refused)
		// Refusals' keys are hashed once reported: put back, they count
		// only in the total, not against a key.
		for _, rr := range vr.Refusals {
			if rr.Refused > 0 {
				c.counts.addShadow(shadowID{version: vr.Version, rule: rr.Rule, refused: true}, "", rr.Limit, rr.Refused)
			}
		}
		for _, sr := range vr.Shadow {
			id, rest := shadowID{version: vr.Version, rule: sr.Rule}, sr.WouldRefuse
			for _, k := range sr.TopKeys {
				c.counts.addShadow(id, k.Key, "", k.Count)
				rest -= k.Count
			}
			if rest > 0 {
				c.counts.addShadow(id, "", "", rest)
			}
		}
	}
}

// flushTimeout bounds the last report, sent when Run's context ends, so a
// gateway shutting down neither loses its last interval's counts nor waits
// long on a service that is down.
const flushTimeout = 2 * time.Second

// heartbeatEvery is how many report intervals may pass without a report
// before an empty one is sent: the service counts in the fleet only
// gateways that report, idle ones included.
const heartbeatEvery = 6

// canaryReportEvery is how often a gateway running a canary version
// reports: the service judges a canary within a window of a few seconds,
// so its counts cannot wait for the usual interval.
const canaryReportEvery = time.Second

func (c *Client) reportLoop(ctx context.Context) {
	tick := min(c.cfg.ReportInterval, canaryReportEvery)
	t := time.NewTicker(tick)
	defer t.Stop()
	// Time since the last report sent, and since the last one that went
	// out or was due: the first interval reports, so a new gateway counts
	// in the fleet after one interval, not six.
	sinceDue := time.Duration(0)
	quiet := heartbeatEvery - 1
	for {
		select {
		case <-ctx.Done():
			c.flush(context.WithoutCancel(ctx))
			return
		case <-t.C:
		}
		if sinceDue += tick; sinceDue < c.cfg.ReportInterval && !c.canary.Load() {
			continue
		}
		sinceDue = 0
		vrs := c.counts.take()
		if quiet++; len(vrs) == 0 && quiet < heartbeatEvery {
			continue
		}
		if err := c.report(ctx, vrs); err != nil {
			if ctx.Err() != nil {
				return
			}
			c.log.Warn("rules service report failed; keeping the counts for the next one", "err", err)
			c.putBack(vrs)
			continue
		}
		quiet = 0
	}
}

// flush sends what was counted since the last report, once, within
// flushTimeout.
func (c *Client) flush(ctx context.Context) {
	vrs := c.counts.take()
	if len(vrs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	if err := c.report(ctx, vrs); err != nil {
		c.log.Warn("last rules service report failed; its counts are lost", "err", err)
	}
}

func (c *Client) report(ctx context.Context, vrs []rulesapi.VersionReport) error {
	if vrs == nil {
		vrs = []rulesapi.VersionReport{}
	}
	rep := rulesapi.Report{Gateway: c.cfg.Gateway, Region: c.cfg.Region, Versions: vrs}
	if err := longpoll.Post(ctx, c.cfg.HTTPClient, c.base.JoinPath(rulesapi.ReportPath).String(), c.cfg.Token, rep, 10*time.Second); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// Outcome is one store call of the gateway as the rules service hears of
// it: the gateway fills one in from each of its decisions (cmd/sluice does
// so from gateway.Config.OnDecision's Event, field for field) and hands it
// to Observe.
type Outcome struct {
	// Version is the snapshot version the request was resolved against,
	// which may no longer be the one in force when the call ends.
	Version int64
	// Key is the store key: "k:" and the API key, or "ip:" and the client
	// address.
	Key string
	// Shadow is true for the check of shadow-mode limits: Limits and Rules
	// are the shadow ones, and Decision says what they would have done.
	Shadow bool
	// Limits are the limits checked, and Rules the rules they came from,
	// in the same order; Decision.Index is a position in both.
	Limits []limit.Limit
	Rules  []*rules.Rule
	// Decision is the store's answer; meaningless when Err is set.
	Decision limit.Decision
	// Err is the store's error.
	Err error
}

// Observe counts one store call of the gateway: enforced decisions for the
// canary, and shadow limits that would have refused. Calls the store could
// not answer are not counted: they say nothing about the rules. Each call
// counts under o.Version, the version its request was resolved against, so
// a swap while requests are in flight moves none of them to the new
// version's counts. Observe must not keep o's slices, and does not.
//
// An outcome that is not Shadow and has no Limits is a request no enforced
// limit applied to: it counts as a request that was let through, so a
// canary that starts refusing such requests is compared with the rest.
func (c *Client) Observe(e Outcome) {
	if e.Err != nil {
		return
	}
	if !e.Shadow {
		refused := len(e.Limits) > 0 && !e.Decision.Allowed
		c.Record(e.Version, refused)
		if i := e.Decision.Index; refused && i >= 0 && i < len(e.Rules) && i < len(e.Limits) && e.Rules[i] != nil && e.Rules[i].ID != 0 {
			c.RecordRefusal(e.Version, e.Rules[i].ID, e.Limits[i].Name, e.Key)
		}
		return
	}
	if e.Decision.Allowed || e.Decision.Index < 0 || e.Decision.Index >= len(e.Rules) || e.Rules[e.Decision.Index] == nil {
		return
	}
	// The store key ("k:" and the API key, or "ip:" and the address) goes
	// to the service as it is; the service keeps it hashed the way the
	// decision log writes it, unless its operator opts in to raw keys.
	c.RecordShadow(e.Version, e.Rules[e.Decision.Index].ID, e.Key)
}

// topOf returns the keys of counts with the highest counts, most first, at
// most rulesapi.MaxReportTopKeys.
func topOf(counts map[string]int64) []rulesapi.KeyCount {
	var top []rulesapi.KeyCount
	for k, n := range counts {
		top = append(top, rulesapi.KeyCount{Key: k, Count: n})
	}
	slices.SortFunc(top, func(a, b rulesapi.KeyCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Key, b.Key))
	})
	return top[:min(len(top), rulesapi.MaxReportTopKeys)]
}

// clampTop lowers the counts of top, most first, so that they add up to
// at most total.
func clampTop(top []rulesapi.KeyCount, total int64) {
	for i := range top {
		top[i].Count = min(top[i].Count, total)
		total -= top[i].Count
	}
}
