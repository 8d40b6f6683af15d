// Package version is the build's version and source revision. Release and
// image builds (internal/images) stamp them with -ldflags -X; a plain `go
// build` leaves Version "dev" and takes the revision from the Go toolchain's
// VCS stamp.
package version

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Version is the release version ("v0.2.0", "v0.2.0-3-gabc1234-dirty"), "dev" when unstamped.
var Version = "dev"

// Revision is the source commit, when known.
var Revision = ""

// String is "<version> (<revision>)", or the version alone.
func String() string {
	rev := ShortRevision()
	if rev == "" {
		return Version
	}
	return Version + " (" + rev + ")"
}

// ShortRevision is the stamped revision, else the toolchain's VCS stamp, cut
// to 12 characters; "" when neither is known.
func ShortRevision() string {
	rev := Revision
	if rev == "" {
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					rev = s.Value
				}
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	return rev
}

// BuildInfo is the clawfarm_build_info gauge, always 1, its labels the
// build's version, revision and Go version — the *_build_info convention of
// Prometheus's own exporters, so a query can join any series on the build
// that produced it, or count the replicas still on an old one.
func BuildInfo() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "clawfarm_build_info",
		Help: "The build of this process: 1, labelled with its version, revision and Go version.",
		ConstLabels: prometheus.Labels{
			"version": Version, "revision": ShortRevision(), "goversion": runtime.Version(),
		},
	})
	g.Set(1)
	return g
}
