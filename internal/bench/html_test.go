package bench

import (
	"strings"
	"testing"
)

func TestWriteHTMLDrawsEverySeries(t *testing.T) {
	tl := Timeline{BinSeconds: 0.5, FocusAdmitted: []float64{1, 2, 3}, FocusLimit: []float64{2, 2, 2},
		Calls: []float64{4, 5, 6}, Local: []float64{0, 1, 0}, Errors: []float64{0, 0, 1}}
	rep := &Report{Scenarios: []ScenarioResult{{Name: "pause", Modes: []ModeResult{
		{Mode: PerRequest, Timeline: tl, P50us: 10, P99us: 20, P999us: 30, Events: []EventMark{{At: 0.5, What: "redis <paused>"}}},
		{Mode: LeasesCache, Timeline: tl, P50us: 1, P99us: 2, P999us: 3},
	}}}}
	var b strings.Builder
	if err := WriteHTML(&b, rep); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		`data-chart="admitted"`, `data-chart="calls"`, `data-chart="latency"`, `data-chart="faults"`,
		`data-series="leases+cache" data-points="3"`, `data-series="limit" data-points="3"`,
		`data-value="30"`, "redis &lt;paused&gt;",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %s", want)
		}
	}
	if strings.Contains(out, "http://") && !strings.Contains(out, `xmlns="http://www.w3.org/2000/svg"`) || strings.Contains(out, "<script src") {
		t.Error("report refers to something outside itself")
	}
}

func TestScriptCalls(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_fcall:calls=12,usec=40,usec_per_call=3.3\r\ncmdstat_get:calls=99,usec=1\r\n" +
		"cmdstat_evalsha:calls=3,usec=9\r\ncmdstat_info:calls=5,usec=1\r\n"
	if got := scriptCalls(info); got != 15 {
		t.Errorf("scriptCalls = %d, want 15 (fcall 12 + evalsha 3)", got)
	}
}
