package console

import (
	"cmp"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/rules"
)

// ruleRow is one rule as the rules and overrides pages show it.
type ruleRow struct {
	admin.RuleView
	MatchText  string
	LimitsText string
	// Pending is the rollout state of the rule's version when that
	// version is newer than the stable one: "canary", or "halted" or
	// "superseded" for a change that is stored but not in force.
	Pending string
}

func newRuleRow(v admin.RuleView) ruleRow {
	return ruleRow{RuleView: v, MatchText: matchText(v.Match), LimitsText: limitsText(v.Limits)}
}

func matchText(m rules.Match) string {
	var parts []string
	for _, p := range [][2]string{{"plan", m.Plan}, {"endpoint", m.Endpoint}, {"key", m.Key}} {
		if p[1] != "" {
			parts = append(parts, p[0]+"="+p[1])
		}
	}
	if len(parts) == 0 {
		return "(all)"
	}
	return strings.Join(parts, " ")
}

func limitsText(ls []rules.Limit) string {
	var parts []string
	for _, l := range ls {
		s := fmt.Sprintf("%s: %v per %v", l.Name, l.Rate, l.Per)
		if l.Burst != 0 {
			s += fmt.Sprintf(", burst %d", l.Burst)
		}
		if l.Algorithm != "" {
			s += fmt.Sprintf(" (%v)", l.Algorithm)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// rulesView is the rules page's data.
type rulesView struct {
	Stable   int64
	Rules    []ruleRow
	Audit    []admin.AuditEntry
	Versions []int64
	CanDiff  bool
	From, To int64 // the versions compared, or offered when Asked is false
	Asked    bool  // whether a diff was asked for
	Diff     []docChange
	DiffErr  string
}

func (c *Console) rulesPage(w http.ResponseWriter, r *http.Request, s *session) {
	cl := c.api.client(s)
	var audit []admin.AuditEntry
	var st admin.RolloutStatus
	rs, err := cl.Rules(r.Context())
	if err == nil {
		audit, err = cl.Audit(r.Context(), 100, 0)
	}
	if err == nil {
		st, err = cl.Rollout(r.Context())
	}
	if err != nil {
		c.fail(w, r, s, "", err)
		return
	}
	states := map[int64]string{}
	for _, ro := range st.Rollouts {
		states[ro.Version] = ro.State
	}
	v := rulesView{Audit: audit, CanDiff: c.cfg.Document != nil, Stable: st.Stable}
	for _, rv := range rs {
		row := newRuleRow(rv)
		if rv.Version > st.Stable {
			row.Pending = cmp.Or(states[rv.Version], "not promoted")
		}
		v.Rules = append(v.Rules, row)
	}
	for _, e := range audit {
		if e.Version != nil && !slices.Contains(v.Versions, *e.Version) {
			v.Versions = append(v.Versions, *e.Version)
		}
	}
	if len(v.Versions) >= 2 {
		// The form offers the newest change first.
		v.From, v.To = v.Versions[1], v.Versions[0]
	}
	q := r.URL.Query()
	if q.Has("from") && q.Has("to") && v.CanDiff {
		v.Asked = true
		v.From, _ = strconv.ParseInt(q.Get("from"), 10, 64)
		v.To, _ = strconv.ParseInt(q.Get("to"), 10, 64)
		v.Diff, err = c.diffVersions(r, v.From, v.To)
		if err != nil {
			v.DiffErr = err.Error()
		}
	}
	c.render(w, r, http.StatusOK, "rules", s, v)
}

// rolloutRow is one rollout with what the page derives from it.
type rolloutRow struct {
	admin.Rollout
	TimeLeft string
}

// rolloutView is the rollout page's data.
type rolloutView struct {
	Stable  int64
	Running []rolloutRow
	Halted  []rolloutRow
	All     []rolloutRow
}

func (c *Console) rolloutPage(w http.ResponseWriter, r *http.Request, s *session) {
	st, err := c.api.client(s).Rollout(r.Context())
	if err != nil {
		c.fail(w, r, s, "", err)
		return
	}
	v := rolloutView{Stable: st.Stable}
	now := c.cfg.Now()
	for _, ro := range st.Rollouts {
		row := rolloutRow{Rollout: ro}
		switch ro.State {
		case "canary":
			row.TimeLeft = c.timeLeft(ro, now)
			v.Running = append(v.Running, row)
		case "halted":
			v.Halted = append(v.Halted, row)
		}
		v.All = append(v.All, row)
	}
	c.render(w, r, http.StatusOK, "rollout", s, v)
}

// timeLeft says how long a running canary has before its window ends, or
// how long it may still wait for samples past it.
func (c *Console) timeLeft(ro admin.Rollout, now time.Time) string {
	if c.cfg.CanaryWindow <= 0 {
		return ""
	}
	end := ro.StartedAt.Add(c.cfg.CanaryWindow)
	if now.Before(end) {
		return end.Sub(now).Round(100*time.Millisecond).String() + " of the window"
	}
	wait := end.Add(c.cfg.CanaryMaxWait)
	if now.Before(wait) {
		return "window over; waiting up to " + wait.Sub(now).Round(100*time.Millisecond).String() + " more for samples"
	}
	return "window over; deciding"
}

func (c *Console) decide(w http.ResponseWriter, r *http.Request, s *session) {
	how, reason := r.PathValue("how"), strings.TrimSpace(r.PostFormValue("reason"))
	cl := c.api.client(s)
	var d admin.Decision
	var err error
	switch how {
	case "promote":
		d, err = cl.Promote(r.Context(), reason)
	case "halt":
		d, err = cl.Halt(r.Context(), reason)
	default:
		c.render(w, r, http.StatusNotFound, "error", s, errorView{Status: http.StatusNotFound, Message: "no rollout action " + how})
		return
	}
	if err != nil {
		c.fail(w, r, s, Prefix+"/rollout", err)
		return
	}
	c.sessions.setFlash(s, fmt.Sprintf("version %d: %s", d.Version, d.State))
	http.Redirect(w, r, Prefix+"/rollout", http.StatusSeeOther)
}

// shadowWindow is a period the shadow page sums over.
type shadowWindow struct{ Label, Since string }

// shadowWindows are the periods the shadow page sums over, shortest first.
var shadowWindows = []shadowWindow{{"5 min", "5m"}, {"1 h", "1h"}, {"6 h", "6h"}, {"24 h", "24h"}, {"7 days", "168h"}}

// shadowRow is one shadow rule's would-be refusals.
type shadowRow struct {
	Rule    *ruleRow // nil when the rule is gone
	ID      int64
	Counts  []int64 // per shadowWindows
	TopKeys []admin.KeyCount
	Max     int64 // the largest top key's count, for the bars
}

// planRow sums shadow rules of one plan.
type planRow struct {
	Plan   string
	Counts []int64
}

// shadowView is the shadow page's data.
type shadowView struct {
	Windows []shadowWindow
	Rules   []shadowRow
	Plans   []planRow
}

func (c *Console) shadowPage(w http.ResponseWriter, r *http.Request, s *session) {
	rs, err := c.api.client(s).Rules(r.Context())
	if err != nil {
		c.fail(w, r, s, "", err)
		return
	}
	byID := map[int64]*ruleRow{}
	for _, rv := range rs {
		row := newRuleRow(rv)
		byID[rv.ID] = &row
	}
	v := shadowView{Windows: shadowWindows}
	at := map[int64]int{}
	for i, win := range shadowWindows {
		srs, err := c.api.client(s).Shadow(r.Context(), win.Since)
		if err != nil {
			c.fail(w, r, s, "", err)
			return
		}
		for _, sr := range srs {
			j, ok := at[sr.Rule]
			if !ok {
				j = len(v.Rules)
				at[sr.Rule] = j
				v.Rules = append(v.Rules, shadowRow{Rule: byID[sr.Rule], ID: sr.Rule, Counts: make([]int64, len(shadowWindows))})
			}
			v.Rules[j].Counts[i] = sr.WouldRefuse
			if i == len(shadowWindows)-1 {
				v.Rules[j].TopKeys = sr.TopKeys
				for _, k := range sr.TopKeys {
					v.Rules[j].Max = max(v.Rules[j].Max, k.Count)
				}
			}
		}
	}
	plans := map[string]int{}
	for _, row := range v.Rules {
		plan := "(no plan)"
		if row.Rule != nil && row.Rule.Match.Plan != "" {
			plan = row.Rule.Match.Plan
		}
		j, ok := plans[plan]
		if !ok {
			j = len(v.Plans)
			plans[plan] = j
			v.Plans = append(v.Plans, planRow{Plan: plan, Counts: make([]int64, len(shadowWindows))})
		}
		for i, n := range row.Counts {
			v.Plans[j].Counts[i] += n
		}
	}
	slices.SortFunc(v.Plans, func(a, b planRow) int { return cmp.Compare(a.Plan, b.Plan) })
	c.render(w, r, http.StatusOK, "shadow", s, v)
}

// overrideRow is one override with its time left.
type overrideRow struct {
	ruleRow
	TimeLeft string
}

// overridesView is the overrides page's data.
type overridesView struct {
	Overrides []overrideRow
	Fleet     admin.Fleet
	Stable    int64
}

func (c *Console) overridesPage(w http.ResponseWriter, r *http.Request, s *session) {
	cl := c.api.client(s)
	var fleet admin.Fleet
	os, err := cl.Overrides(r.Context())
	if err == nil {
		fleet, err = cl.Fleet(r.Context())
	}
	if err != nil {
		c.fail(w, r, s, "", err)
		return
	}
	v := overridesView{Fleet: fleet}
	now := c.cfg.Now()
	for _, o := range os {
		row := overrideRow{ruleRow: newRuleRow(o)}
		if !o.ExpiresAt.IsZero() {
			row.TimeLeft = left(o.ExpiresAt.Sub(now))
		}
		v.Overrides = append(v.Overrides, row)
	}
	c.render(w, r, http.StatusOK, "overrides", s, v)
}

// decimal is how a rate is written in the override form: digits, with an
// optional fraction, as a rules file writes it.
var decimal = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)

// overrideForm reads the override form into the API's body. What the API
// checks itself (a reason, an expiry, their bounds) is left to it, so the
// answer is the API's.
func overrideForm(r *http.Request, now time.Time) (key string, o admin.Override, err error) {
	key = strings.TrimSpace(r.PostFormValue("key"))
	rate, per, burst := strings.TrimSpace(r.PostFormValue("rate")), strings.TrimSpace(r.PostFormValue("per")), strings.TrimSpace(r.PostFormValue("burst"))
	if !decimal.MatchString(rate) {
		return "", o, &admin.Error{Status: http.StatusBadRequest, Field: "rate", Message: fmt.Sprintf("rate %q: want a number such as 10 or 2.5", rate)}
	}
	lim := rules.Limit{Name: "override"}
	if err := lim.Rate.UnmarshalJSON([]byte(rate)); err != nil {
		return "", o, &admin.Error{Status: http.StatusBadRequest, Field: "rate", Message: err.Error()}
	}
	d, err := rules.ParseDuration(per)
	if err != nil {
		return "", o, &admin.Error{Status: http.StatusBadRequest, Field: "per", Message: err.Error()}
	}
	lim.Per = d
	if burst != "" {
		n, err := strconv.ParseInt(burst, 10, 64)
		if err != nil || n <= 0 {
			return "", o, &admin.Error{Status: http.StatusBadRequest, Field: "burst", Message: fmt.Sprintf("burst %q: want a whole number above 0", burst)}
		}
		lim.Burst = rules.Tokens(n)
	}
	o = admin.Override{Limits: []rules.Limit{lim}, Reason: r.PostFormValue("reason")}
	if f := strings.TrimSpace(r.PostFormValue("for")); f != "" {
		d, err := rules.ParseDuration(f)
		if err != nil {
			return "", o, &admin.Error{Status: http.StatusBadRequest, Field: "for", Message: err.Error()}
		}
		o.ExpiresAt = now.Add(time.Duration(d)).UTC().Truncate(time.Second)
	}
	return key, o, nil
}

func (c *Console) createOverride(w http.ResponseWriter, r *http.Request, s *session) {
	key, o, err := overrideForm(r, c.cfg.Now())
	if err == nil {
		var ch admin.Changed[admin.RuleView]
		ch, err = c.api.client(s).SetOverride(r.Context(), key, o)
		if err == nil {
			c.cfg.Logger.Info("console: override set", "who", s.Name, "version", ch.Snapshot.Version)
			c.sessions.setFlash(s, fmt.Sprintf("override of %s in place: version %d", key, ch.Snapshot.Version))
			http.Redirect(w, r, Prefix+"/overrides", http.StatusSeeOther)
			return
		}
	}
	c.fail(w, r, s, Prefix+"/overrides", err)
}

func (c *Console) endOverride(w http.ResponseWriter, r *http.Request, s *session) {
	key := r.PostFormValue("key")
	pub, err := c.api.client(s).EndOverride(r.Context(), key)
	if err != nil {
		c.fail(w, r, s, Prefix+"/overrides", err)
		return
	}
	c.sessions.setFlash(s, fmt.Sprintf("override of %s ended: version %d", key, pub.Version))
	http.Redirect(w, r, Prefix+"/overrides", http.StatusSeeOther)
}

// regionRow is one region of the fleet.
type regionRow struct {
	Region   string
	Counted  int
	Versions []versionCount
	Gateways []gatewayRow
}

// versionCount is how many gateways of a region run one version.
type versionCount struct {
	Version int64
	Count   int
}

// gatewayRow is one gateway with how far behind it is.
type gatewayRow struct {
	admin.Gateway
	Behind   int64 // versions behind the stable one, when below it
	Seen     string
	Reported string
	Stale    bool
	CanaryOf bool
}

// fleetView is the fleet page's data.
type fleetView struct {
	Stable  int64
	Total   int
	Regions []regionRow
}

func (c *Console) fleetPage(w http.ResponseWriter, r *http.Request, s *session) {
	cl := c.api.client(s)
	var st admin.RolloutStatus
	f, err := cl.Fleet(r.Context())
	if err == nil {
		st, err = cl.Rollout(r.Context())
	}
	if err != nil {
		c.fail(w, r, s, "", err)
		return
	}
	canaries := map[string]bool{}
	for _, ro := range st.Rollouts {
		if ro.State == "canary" {
			for _, g := range ro.Canaries {
				canaries[g] = true
			}
		}
	}
	v := fleetView{Stable: st.Stable, Total: f.Counts.Total}
	now := c.cfg.Now()
	at := map[string]int{}
	for _, g := range f.Gateways {
		j, ok := at[g.Region]
		if !ok {
			j = len(v.Regions)
			at[g.Region] = j
			v.Regions = append(v.Regions, regionRow{Region: g.Region, Counted: f.Counts.Regions[g.Region]})
		}
		reg := &v.Regions[j]
		row := gatewayRow{Gateway: g, Seen: ago(now.Sub(g.LastSeen)), CanaryOf: canaries[g.ID]}
		if g.LastReport != nil {
			row.Reported = ago(now.Sub(*g.LastReport))
		}
		if g.Version < st.Stable {
			row.Behind = st.Stable - g.Version
		}
		// A gateway's long poll answers at least every 25 s; one unseen
		// for a minute is not receiving changes (the staleness alert's
		// threshold).
		row.Stale = now.Sub(g.LastSeen) > time.Minute
		reg.Gateways = append(reg.Gateways, row)
		k := slices.IndexFunc(reg.Versions, func(vc versionCount) bool { return vc.Version == g.Version })
		if k < 0 {
			reg.Versions = append(reg.Versions, versionCount{Version: g.Version})
			k = len(reg.Versions) - 1
		}
		reg.Versions[k].Count++
	}
	for i := range v.Regions {
		slices.SortFunc(v.Regions[i].Versions, func(a, b versionCount) int { return cmp.Compare(b.Version, a.Version) })
	}
	c.render(w, r, http.StatusOK, "fleet", s, v)
}
