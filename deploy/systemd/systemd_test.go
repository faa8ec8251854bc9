// Package systemd_test checks the systemd unit with systemd-analyze.
package systemd_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	// TestSystemdAnalyze builds the command from this package: a change
	// to it must rerun the test, whose result go test caches.
	_ "github.com/sluicehq/sluice/internal/cli"
)

// maxExposure bounds systemd-analyze security's exposure score (0 is the
// most locked down, 10 the least; 1.2 when written).
const maxExposure = 2.0

// unit returns the unit file's text and its directives (all the values of
// each key, in order).
func unit(t *testing.T) (string, map[string][]string) {
	t.Helper()
	b, err := os.ReadFile("sluice.service")
	if err != nil {
		t.Fatal(err)
	}
	d := map[string][]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("sluice.service: %q is not KEY=VALUE", line)
		}
		d[k] = append(d[k], v)
	}
	return string(b), d
}

// TestUnitHardening checks the settings that make the unit what
// docs/install.md says it is.
func TestUnitHardening(t *testing.T) {
	_, d := unit(t)
	for k, want := range map[string]string{
		"ExecStart":               "/usr/local/bin/sluice serve --config /etc/sluice/sluice.yaml",
		"ExecReload":              "/bin/kill -HUP $MAINPID",
		"Restart":                 "on-failure",
		"DynamicUser":             "yes",
		"NoNewPrivileges":         "yes",
		"ProtectSystem":           "strict",
		"ProtectHome":             "yes",
		"PrivateTmp":              "yes",
		"CapabilityBoundingSet":   "",
		"AmbientCapabilities":     "",
		"RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
		"ConfigurationDirectory":  "sluice",
		"KillSignal":              "SIGTERM",
	} {
		if got := d[k]; len(got) != 1 || got[0] != want {
			t.Errorf("%s=%q, want %q", k, got, want)
		}
	}
	if got := d["SystemCallFilter"]; len(got) == 0 || got[0] != "@system-service" {
		t.Errorf("SystemCallFilter=%q, want @system-service first", got)
	}
	// The stop timeout leaves room for the drain (server.shutdown_timeout,
	// 10s by default) before systemd kills.
	if stop, err := time.ParseDuration(strings.Join(d["TimeoutStopSec"], "")); err != nil || stop <= 10*time.Second {
		t.Errorf("TimeoutStopSec=%q, want more than the default shutdown_timeout of 10s", d["TimeoutStopSec"])
	}
}

// TestSystemdAnalyze runs systemd-analyze verify on the unit, its
// ExecStart pointing at a sluice built here (verify checks that the
// command exists), and reports systemd-analyze security's exposure score.
func TestSystemdAnalyze(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (Debian's package systemd)")
	}
	text, _ := unit(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "sluice")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/sluice").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	write := func(name, text string) string {
		t.Helper()
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(d, "sluice.service")
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	path := write("unit", strings.ReplaceAll(text, "/usr/local/bin/sluice", bin))

	// verify exits 0 on most problems, naming them: a clean unit prints
	// nothing. A broken copy shows that its complaints are heard.
	verify := func(p string) string {
		out, err := exec.Command(analyze, "verify", p).CombinedOutput()
		if err != nil && len(out) == 0 {
			t.Fatalf("systemd-analyze verify: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	if out := verify(path); out != "" {
		t.Errorf("systemd-analyze verify sluice.service:\n%s", out)
	}
	broken := write("broken", strings.Replace(strings.ReplaceAll(text, "/usr/local/bin/sluice", bin), "ProtectSystem=strict", "ProtectSystem=stricter", 1))
	if out := verify(broken); !strings.Contains(out, "ProtectSystem") && !strings.Contains(out, "protect system") {
		t.Errorf("systemd-analyze verify did not see a bad ProtectSystem: %q", out)
	}

	out, err := exec.Command(analyze, "security", "--offline=true", path).CombinedOutput()
	if err != nil {
		// --offline came with systemd 252; older ones ask the running
		// manager.
		t.Skipf("systemd-analyze security --offline: %v: %s", err, firstLine(string(out)))
	}
	m := regexp.MustCompile(`Overall exposure level for sluice\.service: ([0-9.]+)`).FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("no exposure level in systemd-analyze security's output:\n%s", out)
	}
	score, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("systemd-analyze security: exposure %.1f", score)
	if score > maxExposure {
		t.Errorf("exposure %.1f, want at most %.1f:\n%s", score, maxExposure, out)
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}
