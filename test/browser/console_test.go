package browser

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/internal/keyhash"
	"github.com/sluice-rl/sluice/internal/pgtest"
	"github.com/sluice-rl/sluice/internal/proctest"
	"github.com/sluice-rl/sluice/rules"
)

const (
	consoleRead    = "console-read-token-0123456789"
	consoleWrite   = "console-write-token-0123456789"
	consoleGateway = "console-gateway-token-0123456789"
	// markup is a rule's reason that a page must show as text.
	markup = `<script>alert("x")</script><b>bold</b><img src=x onerror=alert(1)>`
)

// fleet is a rules service on a fresh PostgreSQL schema and two gateways,
// real sluice processes, with traffic that the test starts and stops.
type fleet struct {
	rules    *proctest.Process
	gateways []*proctest.Process
	write    *admin.Client
}

func startFleet(t *testing.T) *fleet {
	t.Helper()
	schema := pgtest.Schema(t, "sluice_console_e2e_")
	f := &fleet{}
	f.rules = sluice.StartEnv(t, []string{"SLUICE_READ_TOKEN=" + consoleRead, "SLUICE_WRITE_TOKEN=" + consoleWrite,
		"SLUICE_GATEWAY_TOKEN=" + consoleGateway},
		"rules", "--postgres", pgtest.DSN(), "--schema", schema, "--listen", "127.0.0.1:0",
		// Two gateways: one canary, one rest; a bad rule is caught by
		// comparison long before its window would promote it.
		"--canary-fraction", "0.5", "--canary-min-gateways", "2", "--canary-min-sample", "20",
		"--canary-window", "2m", "--canary-max-wait", "1m")
	f.write = &admin.Client{BaseURL: f.rules.URL, Token: consoleWrite}
	// The first rules, promoted at once: a generous default whose reason
	// holds markup, and a shadow rule on the free plan that would refuse
	// all but one request a second.
	second := rules.Duration(time.Second)
	_, err := f.write.ApplyRuleSet(context.Background(), rules.Document{
		Keys: map[string]rules.KeyInfo{"key_free": {Plan: "free"}, "key_pro": {Plan: "pro"}},
		Rules: []rules.Rule{
			{Scope: rules.ScopeDefault, Limits: []rules.Limit{{Name: "s", Rate: 1000, Per: second}}, Reason: markup},
			{Scope: rules.ScopePlan, Match: rules.Match{Plan: "free"}, Mode: rules.Shadow,
				Limits: []rules.Limit{{Name: "tight", Rate: 1, Per: second}}, Reason: "try 1/s for free keys"},
		},
	}, false)
	if err != nil {
		t.Fatalf("first rules: %v", err)
	}
	for i, region := range []string{"eu", "us"} {
		id := fmt.Sprintf("gw-%s-%d", region, i+1)
		f.gateways = append(f.gateways, sluice.StartEnv(t, []string{"SLUICE_GATEWAY_TOKEN=" + consoleGateway},
			"gateway", "--rules-url", f.rules.URL, "--gateway-id", id, "--region", region,
			"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"))
	}
	return f
}

// traffic sends requests with key to every gateway, round robin, every
// few milliseconds, until the returned stop is called.
func (f *fleet) traffic(t *testing.T, key string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			req, _ := http.NewRequestWithContext(ctx, "GET", f.gateways[i%len(f.gateways)].URL+"/v1/items", nil)
			req.Header.Set("X-API-Key", key)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// metricsVersion reads sluice_rules_snapshot_version from a gateway.
func metricsVersion(g *proctest.Process) int64 {
	resp, err := http.Get(g.MetricsURL + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^sluice_rules_snapshot_version (\S+)$`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return int64(v)
}

// eventually retries cond every 200 ms until it holds or d has passed.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
	}
}

// screenshot saves the page as name under $SLUICE_SCREENSHOT_DIR (docs/img
// when the docs' picture is retaken), else in the test's temporary
// directory.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1200, 640)); err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := os.Getenv("SLUICE_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.ResetViewport()); err != nil {
		t.Fatalf("screenshot: %v", err)
	}
}

func evaluate[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func signIn(t *testing.T, ctx context.Context, base, token string) {
	t.Helper()
	do(t, ctx, "sign in",
		chromedp.Navigate(base+"/ui/login"),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#who")))
	if loc, _ := chromedp.Run(ctx, chromedp.Location()); strings.Contains(loc, token) {
		t.Errorf("the token is in the URL %s", loc)
	}
}

// TestConsole drives the operator console in headless Chromium against a
// real rules service on PostgreSQL and two gateways: an override with a
// reason and expiry reaches the gateways, a shadow rule's would-be refusals
// show after traffic, a canary of a bad rule halts, a rule's reason with
// markup shows as text, and a read token's writes are refused by the
// server.
func TestConsole(t *testing.T) {
	f := startFleet(t)
	base := f.rules.URL
	ctx := StartFor(t, 4*time.Minute)
	eventually(t, 60*time.Second, "both gateways count in the fleet", func() bool {
		fl, err := f.write.Fleet(context.Background())
		return err == nil && fl.Counts.Total == 2
	})

	signIn(t, ctx, base, consoleWrite)

	// A reason with markup is shown as text.
	do(t, ctx, "rules page", chromedp.Navigate(base+"/ui/rules"), chromedp.WaitVisible(chromedp.CSS("#rules")))
	shown := evaluate[struct {
		Text  string `json:"text"`
		Nodes int    `json:"nodes"`
	}](t, ctx, `(() => { const cells = Array.from(document.querySelectorAll('#rules td.reason'));
		const c = cells.find(td => td.textContent.includes('alert'));
		return {text: c ? c.textContent : '', nodes: cells.reduce((n, td) => n + td.querySelectorAll('*').length, 0)}; })()`)
	if shown.Text != markup || shown.Nodes != 0 {
		t.Errorf("reason shown as %q with %d elements inside, want the text %q and none", shown.Text, shown.Nodes, markup)
	}
	// The style sheet and the script load under the policy, from the
	// console itself and nowhere else.
	loaded := evaluate[struct {
		Header    string   `json:"header"`
		Resources []string `json:"resources"`
	}](t, ctx, `({header: getComputedStyle(document.querySelector('header')).backgroundColor,
		resources: performance.getEntriesByType('resource').map(e => e.name)})`)
	if loaded.Header != "rgb(20, 35, 58)" {
		t.Errorf("header background %q: the style sheet did not apply", loaded.Header)
	}
	if len(loaded.Resources) != 2 {
		t.Errorf("the rules page loaded %v, want the style sheet and the script", loaded.Resources)
	}
	for _, r := range loaded.Resources {
		if !strings.HasPrefix(r, base+"/ui/static/") {
			t.Errorf("the rules page loaded %s, not from the console", r)
		}
	}

	// An override with a reason and an expiry reaches both gateways.
	do(t, ctx, "create an override",
		chromedp.Navigate(base+"/ui/overrides"),
		chromedp.SendKeys(chromedp.CSS("#o-key"), "key_pro"),
		chromedp.SendKeys(chromedp.CSS("#o-rate"), "2"),
		chromedp.SendKeys(chromedp.CSS("#o-reason"), "INC-26: <retry storm>"),
		chromedp.SendKeys(chromedp.CSS("#o-for"), "2h"),
		chromedp.Click(chromedp.CSS("#o-submit")),
		chromedp.WaitVisible(chromedp.CSS("#flash")))
	flash, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#flash")))
	m := regexp.MustCompile(`override of key_pro in place: version (\d+)`).FindStringSubmatch(flash)
	if m == nil {
		t.Fatalf("flash after the override: %q", flash)
	}
	version, _ := strconv.ParseInt(m[1], 10, 64)
	row, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#overrides tr[data-key="key_pro"]`)))
	if !strings.Contains(row, "INC-26: <retry storm>") || !strings.Contains(row, "1h59m") && !strings.Contains(row, "2h0m") {
		t.Errorf("override row %q: want its reason and about 2h left", row)
	}
	for _, g := range f.gateways {
		eventually(t, 20*time.Second, "gateway "+g.URL+" runs the override's version", func() bool { return metricsVersion(g) >= version })
	}
	eventually(t, 20*time.Second, "the console shows both gateways on the override's version", func() bool {
		// Errors are retried: a reload may be under way.
		vs, _ := chromedp.Run(ctx, chromedp.Evaluate[[]int64](`Array.from(document.querySelectorAll('#reach td.version')).map(td => +td.textContent)`))
		if len(vs) == 2 && vs[0] >= version && vs[1] >= version {
			return true
		}
		chromedp.Do(ctx, chromedp.Navigate(base+"/ui/overrides"), chromedp.WaitVisible(chromedp.CSS("#reach")))
		return false
	})
	refused := 0
	for range 10 {
		req, _ := http.NewRequest("GET", f.gateways[0].URL+"/v1/items", nil)
		req.Header.Set("X-API-Key", "key_pro")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusTooManyRequests {
				refused++
			}
		}
	}
	if refused == 0 {
		t.Errorf("10 quick requests of key_pro under an override of 2/s: none refused")
	}

	// Traffic of a free key: the shadow rule would refuse most of it.
	stop := f.traffic(t, "key_free")
	defer stop()
	shadowID := ""
	hashed := keyhash.Of("k:key_free")
	eventually(t, 40*time.Second, "the shadow page shows would-be refusals", func() bool {
		chromedp.Do(ctx, chromedp.Navigate(base+"/ui/shadow"), chromedp.WaitVisible(chromedp.CSS("#shadow")))
		got, _ := chromedp.Run(ctx, chromedp.Evaluate[struct {
			Rule  string `json:"rule"`
			Count int64  `json:"count"`
			Keys  string `json:"keys"`
		}](`(() => { const tr = document.querySelector('#shadow tr[data-rule]'); if (!tr) return {rule: '', count: 0, keys: ''};
			const card = document.querySelector('section.card[data-rule="' + tr.dataset.rule + '"]');
			return {rule: tr.dataset.rule, count: +tr.querySelector('td.num').textContent, keys: card ? card.textContent : ''}; })()`))
		shadowID = got.Rule
		return got.Count > 0 && strings.Contains(got.Keys, hashed)
	})
	if planRow, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#shadow-plans tbody tr"))); !strings.HasPrefix(planRow, "free") {
		t.Errorf("shadow by plan: first row %q, want the free plan", planRow)
	}
	if page, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("main"))); strings.Contains(page, "key_free") {
		t.Errorf("the shadow page shows the raw key key_free; want it hashed as %s", hashed)
	}
	t.Logf("shadow rule %s counted", shadowID)

	// A bad rule: while no traffic flows its canary runs, with nothing
	// to compare; once traffic flows, the canary refuses nearly every
	// free request and halts.
	stop()
	bad, err := f.write.CreateRule(context.Background(), rules.Rule{Scope: rules.ScopePlan, Match: rules.Match{Plan: "free"},
		Limits: []rules.Limit{{Name: "oops", Rate: 1, Per: rules.Duration(time.Hour)}}, Reason: "typo: per 1h"})
	if err != nil {
		t.Fatal(err)
	}
	bv := bad.Snapshot.Version
	do(t, ctx, "rollout page", chromedp.Navigate(base+"/ui/rollout"), chromedp.WaitVisible(chromedp.CSS("#stable")))
	running := fmt.Sprintf(`section.canary[data-version="%d"]`, bv)
	do(t, ctx, "the canary runs", chromedp.WaitVisible(chromedp.CSS(running)))
	card, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(running)))
	if !strings.Contains(card, "of the window") || !strings.Contains(card, "gw-") ||
		evaluate[int](t, ctx, `document.querySelectorAll('#promote, #halt').length`) != 2 {
		t.Errorf("running canary %d shows %q: want its gateway, its time left, promote and halt", bv, card)
	}
	stop = f.traffic(t, "key_free")
	sel := fmt.Sprintf(`section.halted[data-version="%d"]`, bv)
	// The page reloads itself while the canary runs.
	do(t, ctx, "the canary halts", chromedp.WaitVisible(chromedp.CSS(sel)))
	reason, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel+" .reason")))
	if !strings.Contains(reason, "canary refused") || !strings.Contains(reason, "higher") {
		t.Errorf("halted version %d: reason %q, want the comparison", bv, reason)
	}
	stop()
	screenshot(t, ctx, "console-rollout.png")

	// The diff between the newest two versions: the bad rule added.
	do(t, ctx, "diff", chromedp.Navigate(base+"/ui/rules"), chromedp.Click(chromedp.CSS("#diff-form button")),
		chromedp.WaitVisible(chromedp.CSS("#diff")))
	diff, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#diff tbody")))
	if want := fmt.Sprintf("add\trule %d", bad.After.ID); !strings.Contains(diff, want) || !strings.Contains(diff, "typo: per 1h") {
		t.Errorf("diff of the newest two versions: %q, want %q with its reason", diff, want)
	}
	// The halted rule is stored, and marked as not in force.
	if tag, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(fmt.Sprintf(`#rules tr[data-rule="%d"] .pending`, bad.After.ID)))); tag != fmt.Sprintf("v%d halted: not in force", bv) {
		t.Errorf("the halted rule is tagged %q, want it marked as not in force", tag)
	}

	// With the read token the write controls are gone, and the server
	// refuses the writes all the same.
	do(t, ctx, "sign out", chromedp.Click(chromedp.CSS("header form button")), chromedp.WaitVisible(chromedp.CSS("#token")))
	signIn(t, ctx, base, consoleRead)
	do(t, ctx, "overrides as read", chromedp.Navigate(base+"/ui/overrides"), chromedp.WaitVisible(chromedp.CSS("#overrides")))
	controls := evaluate[int](t, ctx, `document.querySelectorAll('#override-form, button.end, #promote, #halt').length`)
	if controls != 0 {
		t.Errorf("a read session sees %d write controls", controls)
	}
	statuses := evaluate[map[string]int](t, ctx, `(async () => {
		const csrf = document.querySelector('input[name=csrf]').value, out = {};
		for (const [path, body] of [['/ui/overrides/end', 'key=key_pro'], ['/ui/rollout/halt', 'reason=x'],
			['/ui/overrides', 'key=k2&rate=1&per=1s&reason=r&for=1h']]) {
			const r = await fetch(path, {method: 'POST', headers: {'Content-Type': 'application/x-www-form-urlencoded'},
				body: body + '&csrf=' + encodeURIComponent(csrf)});
			out[path] = r.status;
		}
		return out; })()`)
	for path, st := range statuses {
		if st != http.StatusForbidden {
			t.Errorf("POST %s with a read session: got %d, want 403", path, st)
		}
	}
	if len(statuses) != 3 {
		t.Errorf("statuses %v: want three", statuses)
	}
	ovs, err := f.write.Overrides(context.Background())
	if err != nil || len(ovs) != 1 || ovs[0].Match.Key != "key_pro" {
		t.Errorf("overrides after the read session's writes: %v, %v; want key_pro's alone", ovs, err)
	}

	// The fleet by region and version.
	do(t, ctx, "fleet", chromedp.Navigate(base+"/ui/fleet"), chromedp.WaitVisible(chromedp.CSS("#fleet-total")))
	regions := evaluate[[]string](t, ctx, `Array.from(document.querySelectorAll('section.region')).map(s => s.dataset.region + ':' + s.querySelectorAll('tr[data-gateway]').length)`)
	if strings.Join(regions, ",") != "eu:1,us:1" {
		t.Errorf("fleet regions %v, want eu:1 and us:1", regions)
	}

	// Why was key_pro limited? A read session may ask: the override, its
	// reason as text, and the key stays out of the URL.
	do(t, ctx, "explain",
		chromedp.Navigate(base+"/ui/explain"),
		chromedp.SendKeys(chromedp.CSS("#e-key"), "key_pro"),
		chromedp.SetValue(chromedp.CSS("#e-path"), "/v1/items"),
		chromedp.Click(chromedp.CSS("#e-submit")),
		chromedp.WaitVisible(chromedp.CSS("#explanation")))
	answer := evaluate[struct {
		Plan     string `json:"plan"`
		Override string `json:"override"`
		Tightest string `json:"tightest"`
		URL      string `json:"url"`
	}](t, ctx, `(() => { const o = Array.from(document.querySelectorAll('#explain-limits tr')).find(tr => tr.textContent.includes('override'));
		return {plan: document.querySelector('#e-plan').textContent, override: o ? o.textContent : '',
			tightest: document.querySelector('#e-tightest').textContent, url: location.href}; })()`)
	if answer.Plan != "pro" || !strings.Contains(answer.Override, "INC-26: <retry storm>") || !strings.Contains(answer.Override, "yes") {
		t.Errorf("explain key_pro: plan %q, override row %q; want plan pro and the override in force with its reason", answer.Plan, answer.Override)
	}
	if strings.Contains(answer.URL, "key_pro") {
		t.Errorf("explain put the API key in the URL %s", answer.URL)
	}
	t.Logf("explain: tightest %q", answer.Tightest)
	// The override refused key_pro: the gateways reported it, hashed.
	if refused, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#explanation"))); !strings.Contains(refused, keyhash.Of("k:key_pro")) {
		t.Errorf("explain lists no refusal of key_pro's hash %s:\n%s", keyhash.Of("k:key_pro"), refused)
	}
}
