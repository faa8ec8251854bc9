package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// git runs git in dir and returns its output without the final newline.
func git(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).Output()
	return strings.TrimRight(string(out), "\n"), err
}

// TestVersionOfABuild builds the command as a user does and checks that
// `sluice --version` and `sluice version` report the commit of this tree,
// whether it was modified, and the Go toolchain that built it.
func TestVersionOfABuild(t *testing.T) {
	root, err := git(t, ".", "rev-parse", "--show-toplevel")
	if err != nil {
		t.Skipf("not in a git checkout, so a build records no commit to compare: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(root, ".git")); err == nil && !fi.IsDir() {
		// cmd/go looks for a .git directory; a linked worktree has a
		// .git file, and its builds record no version control
		// information (docs/install.md says so too).
		t.Skip("a git worktree: the Go toolchain records no commit in its builds")
	}
	head, err := git(t, root, "rev-parse", "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	// cmd/go's own test of modification: any line of git status.
	status, err := git(t, root, "status", "--porcelain")
	if err != nil {
		t.Fatal(err)
	}
	wantModified := "modified:  no"
	if status != "" {
		wantModified = "modified:  yes"
	}
	goVersion, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		t.Fatal(err)
	}
	// -buildvcs=auto is go build's default, spelled out because a machine's
	// go env may turn it off (GOFLAGS=-buildvcs=false).
	bin := buildSluice(t, "-buildvcs=auto")

	for _, args := range [][]string{{"--version"}, {"version"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("sluice %v: %v\n%s", args, err, out)
		}
		lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
		field := func(name string) string {
			for _, l := range lines {
				if v, ok := strings.CutPrefix(l, name+":"); ok {
					return strings.TrimSpace(v)
				}
			}
			t.Errorf("sluice %v: no %s line in\n%s", args, name, out)
			return ""
		}
		version, ok := strings.CutPrefix(lines[0], "sluice ")
		if !ok {
			t.Errorf("sluice %v: first line %q, want \"sluice VERSION\"", args, lines[0])
		}
		// A tagged commit is its tag; any other gets a pseudo-version
		// ending in the commit's first 12 hex digits.
		if tag, err := git(t, root, "describe", "--tags", "--exact-match", "HEAD"); err == nil {
			if strings.TrimSuffix(version, "+dirty") != tag {
				t.Errorf("sluice %v: version %q, want the tag %s", args, version, tag)
			}
		} else if !strings.Contains(version, "-"+head[:12]) {
			t.Errorf("sluice %v: version %q, want a pseudo-version of commit %s", args, version, head[:12])
		}
		if got := field("commit"); got != head {
			t.Errorf("sluice %v: commit %q, want %s (git rev-parse HEAD)", args, got, head)
		}
		if got := field("modified"); !strings.HasPrefix("modified:  "+got, wantModified) {
			t.Errorf("sluice %v: modified %q, want %q (git status: %q)", args, got, wantModified, status)
		}
		wantGo := strings.TrimSpace(string(goVersion)) + " " + runtime.GOOS + "/" + runtime.GOARCH
		if got := field("go"); got != wantGo {
			t.Errorf("sluice %v: go %q, want %q", args, got, wantGo)
		}
	}
}
