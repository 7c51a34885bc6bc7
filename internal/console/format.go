package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// ago writes how long ago something happened, to the second.
func ago(d time.Duration) string {
	if d < time.Second {
		return "just now"
	}
	return d.Round(time.Second).String() + " ago"
}

// left writes how long remains, or that nothing does.
func left(d time.Duration) string {
	if d <= 0 {
		return "expired"
	}
	if d >= time.Minute {
		d = d.Round(time.Minute)
	} else {
		d = d.Round(time.Second)
	}
	return d.String()
}

// pct writes a fraction as a percentage.
func pct(f float64) string { return fmt.Sprintf("%.2f%%", 100*f) }

// prettyJSON indents a JSON value for a <pre>; html/template escapes it.
func prettyJSON(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var buf bytes.Buffer
	if json.Indent(&buf, raw, "", "  ") != nil {
		return string(raw)
	}
	return buf.String()
}
