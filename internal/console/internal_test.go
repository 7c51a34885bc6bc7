package console

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/rules"
)

func TestDiffDocuments(t *testing.T) {
	sec := rules.Duration(time.Second)
	free := rules.Rule{ID: 1, Scope: rules.ScopePlan, Match: rules.Match{Plan: "free"}, Limits: []rules.Limit{{Name: "s", Rate: 10, Per: sec}}}
	freer := free
	freer.Limits = []rules.Limit{{Name: "s", Rate: 20, Per: sec}}
	pro := rules.Rule{ID: 10, Scope: rules.ScopePlan, Match: rules.Match{Plan: "pro"}, Limits: []rules.Limit{{Name: "s", Rate: 99, Per: sec}}}
	ep := rules.Endpoint{Name: "search", Path: "/v1/search", Cost: 5}
	for _, tc := range []struct {
		name string
		a, b rules.Document
		want []string // op kind name
	}{
		{"same", rules.Document{Rules: []rules.Rule{free}}, rules.Document{Rules: []rules.Rule{free}}, nil},
		{"rule changed", rules.Document{Rules: []rules.Rule{free}}, rules.Document{Rules: []rules.Rule{freer}}, []string{"change rule 1"}},
		{"rules by ID, as numbers", rules.Document{Rules: []rules.Rule{pro}}, rules.Document{Rules: []rules.Rule{free}},
			[]string{"add rule 1", "remove rule 10"}},
		{"keys and endpoints", rules.Document{Keys: map[string]rules.KeyInfo{"k1": {Plan: "free"}, "k2": {Plan: "pro"}}},
			rules.Document{Keys: map[string]rules.KeyInfo{"k1": {Plan: "pro"}}, Endpoints: []rules.Endpoint{ep}},
			[]string{"change key k1", "remove key k2", "add endpoint search"}},
	} {
		var got []string
		for _, ch := range diffDocuments(tc.a, tc.b) {
			got = append(got, ch.Op+" "+ch.Kind+" "+ch.Name)
		}
		if strings.Join(got, "; ") != strings.Join(tc.want, "; ") {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestSessionsExpireAndAreBounded(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	ss := newSessions(2, time.Hour, func() time.Time { return now })
	a := ss.start("secret-a", "a", false)
	now = now.Add(time.Minute)
	b := ss.start("secret-b", "b", true)
	if ss.find(a.id) != a || ss.find(b.id) != b || ss.find("nope") != nil {
		t.Fatalf("find: the sessions started are not found, or an unknown ID is")
	}
	if a.CSRF == b.CSRF || a.id == b.id || len(a.id) < 43 {
		t.Errorf("IDs %q, %q and CSRF tokens must be distinct and 256 bits", a.id, b.id)
	}
	// A third session ends the one that expires first.
	c := ss.start("secret-c", "c", false)
	if ss.find(a.id) != nil || ss.find(b.id) != b || ss.find(c.id) != c {
		t.Errorf("full store: got a %v, b %v, c %v; want a ended, b and c live", ss.find(a.id) != nil, ss.find(b.id) != nil, ss.find(c.id) != nil)
	}
	now = now.Add(time.Hour)
	if ss.find(b.id) != nil {
		t.Errorf("a session past its TTL is still found")
	}
	ss.end(c)
	if ss.find(c.id) != nil {
		t.Errorf("an ended session is still found")
	}
}

func TestOverrideForm(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		form      url.Values
		wantField string
		wantRate  string
		wantUntil time.Time
	}{
		{"whole", url.Values{"key": {" k1 "}, "rate": {"10"}, "per": {"1s"}, "reason": {"r"}, "for": {"2h"}}, "", "10", now.Add(2 * time.Hour)},
		{"decimal and days", url.Values{"key": {"k1"}, "rate": {"2.5"}, "per": {"1m"}, "burst": {"7"}, "for": {"1d"}}, "", "2.5", now.Add(24 * time.Hour)},
		{"no expiry is the API's to refuse", url.Values{"key": {"k1"}, "rate": {"1"}, "per": {"1s"}}, "", "1", time.Time{}},
		{"rate not a number", url.Values{"rate": {"1e3"}, "per": {"1s"}}, "rate", "", time.Time{}},
		{"rate empty", url.Values{"per": {"1s"}}, "rate", "", time.Time{}},
		{"bad period", url.Values{"rate": {"1"}, "per": {"soon"}}, "per", "", time.Time{}},
		{"bad burst", url.Values{"rate": {"1"}, "per": {"1s"}, "burst": {"-2"}}, "burst", "", time.Time{}},
		{"bad duration", url.Values{"rate": {"1"}, "per": {"1s"}, "for": {"forever"}}, "for", "", time.Time{}},
	} {
		r, _ := http.NewRequest("POST", "/", strings.NewReader(tc.form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		key, o, err := overrideForm(r, now)
		if tc.wantField != "" {
			ae, ok := err.(*admin.Error)
			if !ok || ae.Field != tc.wantField || ae.Status != http.StatusBadRequest {
				t.Errorf("%s: got error %v, want a 400 naming %s", tc.name, err, tc.wantField)
			}
			continue
		}
		if err != nil || key != "k1" || o.Limits[0].Rate.String() != tc.wantRate || !o.ExpiresAt.Equal(tc.wantUntil) {
			t.Errorf("%s: got key %q, rate %v, until %v, err %v; want k1, %s, %v", tc.name, key, o.Limits[0].Rate, o.ExpiresAt, err, tc.wantRate, tc.wantUntil)
		}
	}
}

func TestTimeLeft(t *testing.T) {
	start := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	c := &Console{cfg: Config{CanaryWindow: 4 * time.Second, CanaryMaxWait: 30 * time.Second}}
	for _, tc := range []struct {
		after time.Duration
		want  string
	}{
		{time.Second, "3s of the window"},
		{5 * time.Second, "window over; waiting up to 29s more for samples"},
		{40 * time.Second, "window over; deciding"},
	} {
		if got := c.timeLeft(admin.Rollout{StartedAt: start}, start.Add(tc.after)); got != tc.want {
			t.Errorf("%v after the start: got %q, want %q", tc.after, got, tc.want)
		}
	}
}
