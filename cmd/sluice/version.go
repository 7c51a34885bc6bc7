package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// version and revision are stamped by a release build:
//
//	go build -ldflags "-X main.version=v1.2.3 -X main.revision=$(git rev-parse HEAD)" ./cmd/sluice
//
// .goreleaser.yaml and the Dockerfile do so. Left empty, they come from
// the build information Go records (see buildVersion).
var (
	version  string
	revision string
)

// buildInfo is what sluice version prints and sluice_build_info carries.
type buildInfo struct {
	Version   string // v1.2.3 when stamped or installed by module version; else "devel"
	Revision  string // the commit; "unknown" when neither stamped nor recorded
	GoVersion string // the toolchain that built the binary
	Modified  bool   // the recorded commit had uncommitted changes
}

// buildVersion returns the binary's version: the stamped one, else the
// module version Go recorded (go install ...@v1.2.3 records it), else
// "devel"; and the stamped revision, else the VCS revision Go recorded.
func buildVersion() buildInfo {
	bi := buildInfo{Version: version, Revision: revision, GoVersion: runtime.Version()}
	if info, ok := debug.ReadBuildInfo(); ok {
		if bi.Version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			bi.Version = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				bi.Revision = cmp.Or(bi.Revision, s.Value)
			case "vcs.modified":
				bi.Modified = revision == "" && s.Value == "true"
			}
		}
	}
	bi.Version = cmp.Or(bi.Version, "devel")
	bi.Revision = cmp.Or(bi.Revision, "unknown")
	return bi
}

// String is the line sluice version prints.
func (b buildInfo) String() string {
	rev := b.Revision
	if b.Modified {
		rev += " (modified)"
	}
	return fmt.Sprintf("sluice %s (revision %s, %s %s/%s)", b.Version, rev, b.GoVersion, runtime.GOOS, runtime.GOARCH)
}

// runVersion prints the version line on stdout.
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "", stderr, "Prints the version, the commit and the Go toolchain sluice was built from.")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	_, err := fmt.Fprintln(stdout, buildVersion())
	return err
}

// buildInfoCollector returns sluice_build_info: always 1, with the
// version, the Go toolchain and the commit as labels, so that a dashboard
// or an alert can tell which build each process runs.
func buildInfoCollector() prometheus.Collector {
	b := buildVersion()
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "sluice_build_info",
		Help:        "Always 1; the labels say which build of sluice this process runs.",
		ConstLabels: prometheus.Labels{"version": b.Version, "goversion": b.GoVersion, "revision": b.Revision},
	}, func() float64 { return 1 })
}
