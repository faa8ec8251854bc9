package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// versionText is what `sluice version` prints: the module version, the
// commit the binary was built from and whether its tree had uncommitted
// changes, the commit's time, and the Go toolchain and platform. Everything
// comes from the build information that the Go toolchain embeds in every
// binary (bi, ok as debug.ReadBuildInfo returns them), so a plain `go build`
// or `go install` is enough: no linker flags.
//
// What each kind of build records:
//   - go install github.com/sluicehq/sluice/cmd/sluice@v1.2.3: the version
//     v1.2.3, and no commit (a module download has no repository).
//   - go build in a clone: a version computed from the repository (the tag
//     on a tagged commit, a pseudo-version such as
//     v0.0.0-20261124024447-061360d9ce66 elsewhere, with +dirty for a
//     modified tree), the commit, and whether the tree was modified.
//   - a build without version control information (-buildvcs=false, a git
//     worktree, a source tree without .git): "(devel)", and the commit is
//     unknown.
func versionText(bi *debug.BuildInfo, ok bool) string {
	version, goVersion := "(devel)", runtime.Version()
	goos, goarch := runtime.GOOS, runtime.GOARCH
	settings := map[string]string{}
	if ok && bi != nil {
		if v := bi.Main.Version; v != "" {
			version = v
		}
		if bi.GoVersion != "" {
			goVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
		if v := settings["GOOS"]; v != "" {
			goos = v
		}
		if v := settings["GOARCH"]; v != "" {
			goarch = v
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "sluice %s\n", version)
	if rev := settings["vcs.revision"]; rev != "" {
		fmt.Fprintf(&b, "commit:    %s\n", rev)
		switch settings["vcs.modified"] {
		case "true":
			b.WriteString("modified:  yes (built from a tree with uncommitted changes)\n")
		case "false":
			b.WriteString("modified:  no\n")
		default:
			b.WriteString("modified:  unknown\n")
		}
		if t := settings["vcs.time"]; t != "" {
			fmt.Fprintf(&b, "committed: %s\n", t)
		}
	} else {
		b.WriteString("commit:    unknown (the build recorded no version control information)\n")
		b.WriteString("modified:  unknown\n")
	}
	fmt.Fprintf(&b, "go:        %s %s/%s\n", goVersion, goos, goarch)
	return b.String()
}
