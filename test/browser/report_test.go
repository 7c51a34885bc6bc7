package browser

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// report is the part of `sluice bench --fleet --json` this test checks
// against the page.
type report struct {
	Scenarios []struct {
		Name  string `json:"name"`
		Modes []struct {
			Mode     string  `json:"mode"`
			P50us    float64 `json:"p50_us"`
			P99us    float64 `json:"p99_us"`
			P999us   float64 `json:"p999_us"`
			Timeline struct {
				FocusAdmitted []float64 `json:"focus_admitted"`
				FocusLimit    []float64 `json:"focus_limit"`
				Calls         []float64 `json:"calls"`
				Local         []float64 `json:"local"`
			} `json:"timeline"`
			Events []struct {
				What string `json:"what"`
			} `json:"events"`
		} `json:"modes"`
	} `json:"scenarios"`
}

// drawn is what a chart of the page shows once Chromium has laid it out.
type drawn struct {
	Chart    string `json:"chart"`
	Scenario string `json:"scenario"`
	Width    float64
	Paths    []drawnPath `json:"paths"`
	Bars     []struct {
		Series string  `json:"series"`
		Value  float64 `json:"value"`
		Height float64 `json:"height"`
	} `json:"bars"`
	Labels []string `json:"labels"`
	Events []struct {
		Text  string  `json:"text"`
		Width float64 `json:"width"`
	} `json:"events"`
}

// drawnPath is one line of a chart: its series, how many points its
// drawing has, and the box the browser computed for it.
type drawnPath struct {
	Series string  `json:"series"`
	Points int     `json:"points"`
	Width  float64 `json:"width"`
	Height float64 `json:"height"`
}

// inspect reads every chart from the rendered DOM: the number of points in
// each path's drawing, the boxes the browser computed for paths, bars and
// labels.
const inspect = `Array.from(document.querySelectorAll('svg.chart')).map(svg => ({
  chart: svg.dataset.chart, scenario: svg.dataset.scenario, Width: svg.getBoundingClientRect().width,
  paths: Array.from(svg.querySelectorAll('path')).map(p => { const b = p.getBBox(); return {
    series: p.dataset.series, points: (p.getAttribute('d').match(/[ML]/g) || []).length, width: b.width, height: b.height }; }),
  bars: Array.from(svg.querySelectorAll('rect.bar')).map(r => ({series: r.dataset.series, value: +r.dataset.value, height: r.getBBox().height})),
  labels: Array.from(svg.querySelectorAll('text.bar-label')).map(t => t.textContent),
  events: Array.from(svg.querySelectorAll('text.event-label')).map(t => ({text: t.textContent, width: t.getComputedTextLength()})),
}))`

// TestFleetReportRenders runs a short fleet bench (a retry storm and a
// Redis pause, every mode, on redis-server processes the run starts),
// opens its HTML report in headless Chromium, and checks that every chart
// was drawn with the run's own figures from the JSON.
func TestFleetReportRenders(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-o", bin, "./cmd/sluice")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build sluice: %v\n%s", err, out)
	}
	jsonPath, htmlPath := filepath.Join(dir, "bench.json"), filepath.Join(dir, "bench.html")
	run := exec.Command(bin, "bench", "--fleet", "--local", "--scenario", "storm,pause", "--duration", "1500ms",
		"--offered", "400", "--gateways", "3", "--concurrency", "4", "--json", jsonPath, "--html", htmlPath, "--max-error-rate", "0.05")
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("sluice bench --fleet: %v\n%s", err, out)
	}
	for _, want := range []string{"scenario", "storm", "pause", "leases+cache"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	raw, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatalf("decode %s: %v", jsonPath, err)
	}

	ctx := Start(t)
	if err := chromedp.Do(ctx, chromedp.Navigate("file://"+htmlPath), chromedp.WaitVisible(chromedp.CSS("svg.chart"))); err != nil {
		t.Fatalf("open the report in chromium: %v", err)
	}
	charts, err := chromedp.Run(ctx, chromedp.Evaluate[[]drawn](inspect))
	if err != nil {
		t.Fatalf("read the charts from the page: %v", err)
	}
	find := func(scenario, chart string) *drawn {
		i := slices.IndexFunc(charts, func(c drawn) bool { return c.Scenario == scenario && c.Chart == chart })
		if i < 0 {
			t.Errorf("%s: no %s chart on the page", scenario, chart)
			return nil
		}
		return &charts[i]
	}
	if len(rep.Scenarios) != 2 {
		t.Fatalf("JSON has %d scenarios, want 2", len(rep.Scenarios))
	}
	for _, s := range rep.Scenarios {
		series := map[string]func(i int) []float64{
			"admitted": func(i int) []float64 { return s.Modes[i].Timeline.FocusAdmitted },
			"calls":    func(i int) []float64 { return s.Modes[i].Timeline.Calls },
		}
		if s.Name == "pause" {
			series["faults"] = func(i int) []float64 { return s.Modes[i].Timeline.Local }
		}
		for chart, values := range series {
			c := find(s.Name, chart)
			if c == nil {
				continue
			}
			if c.Width <= 0 {
				t.Errorf("%s %s: chart laid out %v wide", s.Name, chart, c.Width)
			}
			for i, m := range s.Modes {
				j := slices.IndexFunc(c.Paths, func(p drawnPath) bool {
					return p.Series == m.Mode
				})
				if j < 0 {
					t.Errorf("%s %s: no line for mode %s", s.Name, chart, m.Mode)
					continue
				}
				p, v := c.Paths[j], values(i)
				if p.Points != len(v) {
					t.Errorf("%s %s %s: line of %d points, JSON has %d", s.Name, chart, m.Mode, p.Points, len(v))
				}
				if p.Width <= 0 {
					t.Errorf("%s %s %s: line drawn %v wide", s.Name, chart, m.Mode, p.Width)
				}
				if slices.Max(v) > slices.Min(v) && p.Height <= 0 {
					t.Errorf("%s %s %s: values from %v to %v drawn flat", s.Name, chart, m.Mode, slices.Min(v), slices.Max(v))
				}
			}
			if chart == "admitted" {
				limits := s.Modes[0].Timeline.FocusLimit
				if !slices.ContainsFunc(c.Paths, func(p drawnPath) bool {
					return p.Series == "limit" && p.Points == len(limits)
				}) {
					t.Errorf("%s: no limit line of %d points", s.Name, len(limits))
				}
			}
			if chart == "faults" {
				var want, got []string
				for _, ev := range s.Modes[0].Events {
					want = append(want, ev.What)
				}
				for _, ev := range c.Events {
					got = append(got, ev.Text)
					if ev.Width <= 0 {
						t.Errorf("%s: event label %q not rendered", s.Name, ev.Text)
					}
				}
				if len(want) == 0 || !slices.Equal(got, want) {
					t.Errorf("%s: fault timeline shows events %q, JSON has %q", s.Name, got, want)
				}
			}
		}
		c := find(s.Name, "latency")
		if c == nil {
			continue
		}
		var want []string
		for _, m := range s.Modes {
			for _, v := range []float64{m.P50us, m.P99us, m.P999us} {
				want = append(want, fmt.Sprintf("%.0f", v))
			}
		}
		if !slices.Equal(c.Labels, want) {
			t.Errorf("%s latency: bars labelled %q, JSON has %q", s.Name, c.Labels, want)
		}
		for _, b := range c.Bars {
			if b.Value >= 1 && b.Height <= 0 {
				t.Errorf("%s latency %s: bar of %v µs drawn %v high", s.Name, b.Series, b.Value, b.Height)
			}
		}
	}
}
