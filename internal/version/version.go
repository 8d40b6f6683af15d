// Package version is the build's version and source revision. Release and
// image builds (internal/images) stamp them with -ldflags -X; a plain `go
// build` leaves Version "dev" and takes the revision from the Go toolchain's
// VCS stamp.
package version

import "runtime/debug"

// Version is the release version ("v0.2.0", "v0.2.0-3-gabc1234-dirty"), "dev" when unstamped.
var Version = "dev"

// Revision is the source commit, when known.
var Revision = ""

// String is "<version> (<revision>)", or the version alone.
func String() string {
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
	if rev == "" {
		return Version
	}
	return Version + " (" + rev + ")"
}
