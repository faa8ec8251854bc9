package cli

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestVersionText(t *testing.T) {
	settings := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i+1 < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	here := runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{{
		name: "a clean clone",
		bi: &debug.BuildInfo{
			GoVersion: "go1.26.8",
			Main:      debug.Module{Path: "github.com/sluicehq/sluice", Version: "v0.0.0-20261124024447-061360d9ce66"},
			Settings: settings("GOOS", "linux", "GOARCH", "arm64", "vcs", "git",
				"vcs.revision", "061360d9ce6620451e338a50d2d783e2520a8bb7",
				"vcs.time", "2026-11-24T02:44:47Z", "vcs.modified", "false"),
		},
		ok: true,
		want: "sluice v0.0.0-20261124024447-061360d9ce66\n" +
			"commit:    061360d9ce6620451e338a50d2d783e2520a8bb7\n" +
			"modified:  no\n" +
			"committed: 2026-11-24T02:44:47Z\n" +
			"go:        go1.26.8 linux/arm64\n",
	}, {
		name: "a modified tree at a tag",
		bi: &debug.BuildInfo{
			GoVersion: "go1.26.8",
			Main:      debug.Module{Path: "github.com/sluicehq/sluice", Version: "v0.5.0+dirty"},
			Settings: settings("GOOS", "darwin", "GOARCH", "amd64",
				"vcs.revision", "9e45e8fa4396927fa2f5842812d5eae3219f140d", "vcs.modified", "true"),
		},
		ok: true,
		want: "sluice v0.5.0+dirty\n" +
			"commit:    9e45e8fa4396927fa2f5842812d5eae3219f140d\n" +
			"modified:  yes (built from a tree with uncommitted changes)\n" +
			"go:        go1.26.8 darwin/amd64\n",
	}, {
		name: "go install of a release",
		bi: &debug.BuildInfo{
			GoVersion: "go1.26.2",
			Main:      debug.Module{Path: "github.com/sluicehq/sluice", Version: "v0.5.0", Sum: "h1:abc="},
			Settings:  settings("GOOS", "linux", "GOARCH", "amd64", "-trimpath", "true"),
		},
		ok: true,
		want: "sluice v0.5.0\n" +
			"commit:    unknown (the build recorded no version control information)\n" +
			"modified:  unknown\n" +
			"go:        go1.26.2 linux/amd64\n",
	}, {
		name: "no version control information",
		bi: &debug.BuildInfo{
			GoVersion: "go1.26.8",
			Main:      debug.Module{Path: "github.com/sluicehq/sluice", Version: "(devel)"},
			Settings:  settings("GOOS", "linux", "GOARCH", "amd64", "-buildvcs", "false"),
		},
		ok: true,
		want: "sluice (devel)\n" +
			"commit:    unknown (the build recorded no version control information)\n" +
			"modified:  unknown\n" +
			"go:        go1.26.8 linux/amd64\n",
	}, {
		name: "a revision without modified or time",
		bi: &debug.BuildInfo{
			GoVersion: "go1.26.8",
			Settings:  settings("vcs.revision", "abc123"),
		},
		ok: true,
		want: "sluice (devel)\n" +
			"commit:    abc123\n" +
			"modified:  unknown\n" +
			"go:        go1.26.8 " + runtime.GOOS + "/" + runtime.GOARCH + "\n",
	}, {
		name: "no build information at all",
		bi:   nil,
		ok:   false,
		want: "sluice (devel)\n" +
			"commit:    unknown (the build recorded no version control information)\n" +
			"modified:  unknown\n" +
			"go:        " + here + "\n",
	}} {
		if got := versionText(tc.bi, tc.ok); got != tc.want {
			t.Errorf("%s: got\n%s\nwant\n%s", tc.name, got, tc.want)
		}
	}
}
