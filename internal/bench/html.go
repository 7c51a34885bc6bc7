package bench

import (
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"
)

// The report's charts are SVG drawn here, inline in one HTML page: it
// fetches nothing, runs no script, and opens from a file anywhere. Each
// chart and series carries data attributes (data-chart, data-series,
// data-points, data-value) so that a test can check what was drawn
// against the JSON.

// modeColors are the modes' line colours, in Modes order.
var modeColors = map[Mode]string{PerRequest: "#d62728", Leases: "#ff7f0e", LeasesCache: "#1f77b4"}

const (
	chartW, chartH         = 640, 240
	padL, padR, padT, padB = 64, 16, 28, 36
)

// WriteHTML writes rep as one self-contained HTML page: per scenario, the
// summary table and charts of the focus key's admitted rate against its
// limit, Redis calls a second, latency percentiles and, for scenarios with
// events, the fault timeline.
func WriteHTML(w io.Writer, rep *Report) error {
	var b strings.Builder
	e := html.EscapeString
	b.WriteString(`<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>sluice fleet bench</title><style>
body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}th{background:#f4f4f4}
td:first-child,th:first-child{text-align:left}.charts{display:flex;flex-wrap:wrap;gap:12px}
svg.chart{border:1px solid #ddd;background:#fff}.axis{stroke:#888}.grid{stroke:#eee}text{font-size:11px;fill:#333}
.title{font-size:13px;font-weight:600}.limit{stroke:#000;stroke-dasharray:6 4}.event{stroke-dasharray:3 3}
.claim{color:#555;font-style:italic}</style></head><body>`)
	fmt.Fprintf(&b, "<h1>sluice fleet bench</h1><p>%s: %d virtual gateways, %d workers, %.0f requests a second offered, %.1f s per mode and scenario; against %s.</p>",
		e(rep.Started.Format("2006-01-02 15:04 UTC")), rep.Gateways, rep.Workers, rep.Rate, rep.Seconds, e(rep.Target))
	if rep.Command != "" {
		fmt.Fprintf(&b, "<p><code>%s</code></p>", e(rep.Command))
	}
	for _, s := range rep.Scenarios {
		fmt.Fprintf(&b, `<section id="scenario-%s" data-scenario="%s"><h2>%s</h2><p>%s</p><p class="claim">Design: %s</p>`,
			e(s.Name), e(s.Name), e(s.Name), e(s.About), e(s.Claim))
		b.WriteString("<table><tr><th>mode</th><th>requests</th><th>throughput/s</th><th>admitted</th><th>exact</th><th>over %</th><th>under %</th><th>focus key %</th><th>focus in window</th><th>calls/request</th><th>p50 µs</th><th>p99 µs</th><th>p99.9 µs</th><th>errors</th><th>sources</th></tr>")
		for _, m := range s.Modes {
			focus := 0.0
			if len(m.Keys) > 0 {
				focus = m.Keys[0].OverPct
			}
			window := "-"
			if m.Window != nil {
				window = fmt.Sprintf("%.2f× limit (%.1f–%.1f s)", m.Window.Ratio, m.Window.From, m.Window.To)
			}
			fmt.Fprintf(&b, "<tr><td>%s</td><td>%d</td><td>%.0f</td><td>%d</td><td>%d</td><td>%.2f</td><td>%.2f</td><td>%+.2f</td><td>%s</td><td>%.3f</td><td>%.0f</td><td>%.0f</td><td>%.0f</td><td>%d</td><td>%s</td></tr>",
				e(string(m.Mode)), m.Requests, m.Throughput, m.Admitted, m.Exact, m.OverPct, m.UnderPct, focus, e(window), m.CallsPerRequest,
				m.P50us, m.P99us, m.P999us, m.ErrorCount(), e(formatCounts(m.Sources)))
		}
		b.WriteString(`</table><div class="charts">`)
		focusLimit := func(m ModeResult) []float64 { return m.Timeline.FocusLimit }
		lineChart(&b, s, "admitted", "focus key: admitted a second against its limit (dashed)",
			func(m ModeResult) []float64 { return m.Timeline.FocusAdmitted }, focusLimit)
		lineChart(&b, s, "calls", "Redis calls a second (all gateways)",
			func(m ModeResult) []float64 { return m.Timeline.Calls }, nil)
		latencyChart(&b, s)
		if slices.ContainsFunc(s.Modes, func(m ModeResult) bool { return len(m.Events) > 0 }) {
			lineChart(&b, s, "faults", "answered without Redis or failed, a second; events marked",
				func(m ModeResult) []float64 {
					out := make([]float64, len(m.Timeline.Local))
					for i := range out {
						out[i] = m.Timeline.Local[i] + m.Timeline.Errors[i]
					}
					return out
				}, nil)
		}
		b.WriteString("</div>")
		for _, m := range s.Modes {
			if len(m.Events) == 0 {
				continue
			}
			fmt.Fprintf(&b, "<p>%s timeline:", e(string(m.Mode)))
			for _, ev := range m.Events {
				fmt.Fprintf(&b, " %.2f s %s;", ev.At, e(ev.What))
			}
			b.WriteString("</p>")
		}
		b.WriteString("</section>")
	}
	b.WriteString("</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func formatCounts(m map[string]int64) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// lineChart draws one line per mode of series(m) over time, and the
// dashed reference line of ref(first mode) when ref is set. Event markers
// are drawn when the chart is the fault timeline.
func lineChart(b *strings.Builder, s ScenarioResult, name, title string, series, ref func(ModeResult) []float64) {
	if len(s.Modes) == 0 {
		return
	}
	bin := s.Modes[0].Timeline.BinSeconds
	n := 0
	top := 0.0
	for _, m := range s.Modes {
		v := series(m)
		n = max(n, len(v))
		for _, x := range v {
			top = max(top, x)
		}
		if ref != nil {
			for _, x := range ref(m) {
				top = max(top, x)
			}
		}
	}
	top = niceCeil(top)
	span := float64(n) * bin
	x := func(i int) float64 { return padL + (float64(i)+0.5)*bin/span*(chartW-padL-padR) }
	y := func(v float64) float64 { return chartH - padB - v/top*(chartH-padT-padB) }
	open(b, s.Name, name, title, top, span, false)
	path := func(class, mode string, v []float64, color string) {
		var d strings.Builder
		for i, val := range v {
			cmd := 'L'
			if i == 0 {
				cmd = 'M'
			}
			fmt.Fprintf(&d, "%c%.1f,%.1f", cmd, x(i), y(val))
		}
		fmt.Fprintf(b, `<path class="%s" data-series="%s" data-points="%d" d="%s" fill="none" stroke="%s" stroke-width="2"/>`,
			class, html.EscapeString(mode), len(v), d.String(), color)
	}
	if ref != nil {
		path("limit", "limit", ref(s.Modes[0]), "#000")
	}
	for _, m := range s.Modes {
		path("series", string(m.Mode), series(m), modeColors[m.Mode])
	}
	if name == "faults" || name == "admitted" {
		// Each mode's events as lines in its colour (a failover takes
		// its own time in each run); the first mode's are labelled.
		for i, m := range s.Modes {
			for j, ev := range m.Events {
				ex := padL + ev.At/span*(chartW-padL-padR)
				fmt.Fprintf(b, `<line class="event" x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="%s"/>`, ex, ex, padT, chartH-padB, modeColors[m.Mode])
				if i == 0 {
					// Past the middle the label reads leftwards, so that it
					// stays inside the chart.
					lx, anchor := ex+3, "start"
					if ex > chartW/2 {
						lx, anchor = ex-3, "end"
					}
					fmt.Fprintf(b, `<text class="event-label" x="%.1f" y="%d" text-anchor="%s">%s</text>`, lx, padT+10+12*(j%3), anchor, html.EscapeString(ev.What))
				}
			}
		}
	}
	legend(b, s)
	b.WriteString("</svg>")
}

// latencyChart draws p50, p99 and p99.9 of each mode as bars on a log
// scale from 0.1 µs (percentiles span four orders of magnitude under a
// fault), labelled with their values in microseconds.
func latencyChart(b *strings.Builder, s ScenarioResult) {
	top := 1.0
	for _, m := range s.Modes {
		top = max(top, m.P999us)
	}
	top = math.Pow(10, math.Ceil(math.Log10(top)))
	open(b, s.Name, "latency", "decision latency p50 / p99 / p99.9 (µs, log scale)", top, 0, true)
	scale := func(v float64) float64 {
		return math.Log10(max(v, latencyFloor)/latencyFloor) / math.Log10(top/latencyFloor) * (chartH - padT - padB)
	}
	groupW := float64(chartW-padL-padR) / float64(max(1, len(s.Modes)))
	barW := groupW / 4
	for i, m := range s.Modes {
		for j, v := range []float64{m.P50us, m.P99us, m.P999us} {
			bx := padL + float64(i)*groupW + barW/2 + float64(j)*barW
			h := scale(v)
			fmt.Fprintf(b, `<rect class="bar" data-series="%s" data-value="%.0f" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" opacity="%.2f"/>`,
				html.EscapeString(string(m.Mode)), v, bx, chartH-padB-h, barW-2, h, modeColors[m.Mode], 1-0.25*float64(j))
			fmt.Fprintf(b, `<text class="bar-label" x="%.1f" y="%.1f">%.0f</text>`, bx, chartH-padB-h-3, v)
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%d">%s</text>`, padL+float64(i)*groupW+barW/2, chartH-padB+14, html.EscapeString(string(m.Mode)))
	}
	b.WriteString("</svg>")
}

// latencyFloor is the bottom of the latency chart's log scale, in µs.
const latencyFloor = 0.1

// open starts a chart: the svg element, title, axes and the y scale,
// linear from 0 or logarithmic from latencyFloor, and the x scale in
// seconds when span > 0.
func open(b *strings.Builder, scenario, name, title string, top, span float64, logScale bool) {
	fmt.Fprintf(b, `<svg class="chart" data-chart="%s" data-scenario="%s" width="%d" height="%d" viewBox="0 0 %d %d" xmlns="http://www.w3.org/2000/svg">`,
		name, html.EscapeString(scenario), chartW, chartH, chartW, chartH)
	fmt.Fprintf(b, `<text class="title" x="%d" y="16">%s</text>`, padL, html.EscapeString(title))
	ticks := 4
	if logScale {
		ticks = int(math.Round(math.Log10(top / latencyFloor)))
	}
	for i := 0; i <= ticks; i++ {
		v := top * float64(i) / float64(ticks)
		if logScale {
			v = latencyFloor * math.Pow(10, float64(i))
		}
		yy := chartH - padB - float64(i)/float64(ticks)*(chartH-padT-padB)
		fmt.Fprintf(b, `<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`,
			padL, chartW-padR, yy, yy, padL-4, yy+4, compact(v))
	}
	if span > 0 {
		for i := 0; i <= 5; i++ {
			xx := padL + float64(i)/5*(chartW-padL-padR)
			fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%.1fs</text>`, xx, chartH-padB+14, span*float64(i)/5)
		}
	}
	fmt.Fprintf(b, `<line class="axis" x1="%d" x2="%d" y1="%d" y2="%d"/>`, padL, chartW-padR, chartH-padB, chartH-padB)
}

func legend(b *strings.Builder, s ScenarioResult) {
	for i, m := range s.Modes {
		lx := padL + i*150
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text class="legend" x="%d" y="%d">%s</text>`,
			lx, chartH-12, modeColors[m.Mode], lx+14, chartH-3, html.EscapeString(string(m.Mode)))
	}
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten, so the axis
// reads in round numbers; zero stays one.
func niceCeil(v float64) float64 {
	if !(v > 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func compact(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.3gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.3gk", v/1e3)
	}
	return fmt.Sprintf("%.3g", v)
}
