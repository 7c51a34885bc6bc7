// Package rulesapi is the protocol between the rules service and the
// gateways that follow it: the paths and headers of the long poll, and the
// snapshot, fleet and report bodies. Both sides import it; neither imports
// the other, so the rules service links no gateway code.
package rulesapi

import (
	"encoding/json"
	"fmt"
	"strings"
)

// The paths of the rules service that gateways use, below its base URL.
const (
	// SnapshotPath answers GET with the snapshot a gateway should run:
	// ?after=VERSION&gateway=ID&region=REGION&wait=DURATION. It answers at
	// once when that snapshot differs from VERSION, else holds the request
	// until it does or wait passes, then answers 304 Not Modified.
	SnapshotPath = "/v1/snapshot"
	// ReportPath takes a POSTed [Report].
	ReportPath = "/v1/report"
	// FleetHeader carries the [Fleet] as JSON on every snapshot answer,
	// 304 included, so fleet counts stay fresh between versions.
	FleetHeader = "Sluice-Fleet"
	// CanaryHeader is "1" on every snapshot answer, 304 included, while
	// the gateway runs a canary version, and "0" otherwise: a promoted
	// canary stays on its version without a new body.
	CanaryHeader = "Sluice-Canary"
)

// MaxGatewayID is the longest gateway ID the service accepts, in bytes.
const MaxGatewayID = 128

// Snapshot is the body of a 200 answer from SnapshotPath: one immutable,
// versioned rule set.
type Snapshot struct {
	// Version orders snapshots; it comes from one database sequence.
	Version int64 `json:"version"`
	// Hash is rules.Set.Hash of Document: the client checks it after
	// compiling, so a damaged body is never swapped in.
	Hash string `json:"hash"`
	// Canary is true when this gateway was chosen to try the version
	// before the rest of the fleet.
	Canary bool `json:"canary,omitempty"`
	// Rollback is true when Version is older than the one the gateway
	// said it holds and the service means it: the version the gateway
	// holds was a canary that was halted or superseded, and never
	// promoted. A client takes an older version only with Rollback set;
	// any other older version is a stale replica or a proxy's cache.
	Rollback bool `json:"rollback,omitempty"`
	// Fleet counts the gateways subscribed when the answer was written.
	Fleet Fleet `json:"fleet"`
	// Document is a rules.Document as JSON.
	Document json.RawMessage `json:"document"`
}

// Fleet is how many gateways are subscribed to the rules service: those
// that polled within the service's gateway TTL.
type Fleet struct {
	Total   int            `json:"total"`
	Regions map[string]int `json:"regions,omitempty"`
}

// Report is what a gateway tells the service every report interval.
type Report struct {
	Gateway  string          `json:"gateway"`
	Region   string          `json:"region,omitempty"`
	Versions []VersionReport `json:"versions"`
}

// The bounds of one report. The service refuses a report beyond them with
// 400 (413 for the body), naming the bound; a gateway's own reports stay
// well inside them.
const (
	// MaxReportBytes bounds a report's JSON body.
	MaxReportBytes = 256 << 10
	// MaxReportVersions bounds Report.Versions.
	MaxReportVersions = 16
	// MaxReportShadowRules bounds the shadow rules of one report, summed
	// over its versions.
	MaxReportShadowRules = 256
	// MaxReportRefusalRules bounds the refusing rules of one report,
	// summed over its versions.
	MaxReportRefusalRules = 256
	// MaxReportTopKeys bounds ShadowReport.TopKeys and
	// RefusalReport.TopKeys.
	MaxReportTopKeys = 10
	// MaxReportCount bounds every count of a report: 2^40, a trillion
	// requests in one report interval, is no real gateway's. Sums of many
	// reports then stay far from overflowing an int64.
	MaxReportCount = 1 << 40
	// MaxReportKey bounds a top key in bytes: the kind prefix ("k:" or
	// "ip:") and an API key of at most 256 bytes, or an address.
	MaxReportKey = 3 + 256
)

// VersionReport counts the decisions a gateway made under one snapshot
// version since its last report.
type VersionReport struct {
	Version int64 `json:"version"`
	// Requests counts every request resolved under the version, those no
	// enforced limit applied to included: a canary that starts refusing
	// requests that had no limit before is then compared with the rest.
	Requests int64 `json:"requests"`
	// Refused counts requests refused by enforced limits.
	Refused int64 `json:"refused"`
	// Shadow lists the shadow rules that would have refused a request.
	Shadow []ShadowReport `json:"shadow,omitempty"`
	// Refusals lists the enforced rules that refused a request, with the
	// keys they refused most: the service's busiest-refused-keys summary
	// and its answer to which rule refused a key last.
	Refusals []RefusalReport `json:"refusals,omitempty"`
}

// RefusalReport is what one enforced rule refused.
type RefusalReport struct {
	Rule int64 `json:"rule"`
	// Limit is the name of the rule's limit that refused most.
	Limit   string `json:"limit,omitempty"`
	Refused int64  `json:"refused"`
	// TopKeys are the keys it refused most, most first, hashed as
	// keyhash.Of writes them (never raw). Their counts may add up to less
	// than Refused.
	TopKeys []KeyCount `json:"top_keys,omitempty"`
}

// ShadowReport is what one shadow rule would have refused.
type ShadowReport struct {
	Rule        int64 `json:"rule"`
	WouldRefuse int64 `json:"would_refuse"`
	// TopKeys are the keys it would have refused most, most first. Their
	// counts may add up to less than WouldRefuse.
	TopKeys []KeyCount `json:"top_keys,omitempty"`
}

// KeyCount is one key's count.
type KeyCount struct {
	// Key is the store key: "k:" and the API key, or "ip:" and the client
	// address. The rules service stores it as keyhash.Of writes it unless its
	// operator opts in to raw keys.
	Key   string `json:"key"`
	Count int64  `json:"count"`
}

// CheckGatewayID reports whether id can name a gateway: printable ASCII
// without spaces, at most MaxGatewayID bytes.
func CheckGatewayID(id string) error {
	if id == "" {
		return fmt.Errorf("gateway ID is empty")
	}
	if len(id) > MaxGatewayID {
		return fmt.Errorf("gateway ID is %d bytes, longer than %d", len(id), MaxGatewayID)
	}
	if strings.IndexFunc(id, func(r rune) bool { return r <= ' ' || r >= 0x7f }) >= 0 {
		return fmt.Errorf("gateway ID %q may hold only printable ASCII without spaces", id)
	}
	return nil
}
