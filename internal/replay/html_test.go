package replay

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// chromium returns the path of a Chromium to render pages with, or skips
// the test when there is none (CI sets SLUICE_REQUIRE_CHROMIUM=1 and
// installs Debian's).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("SLUICE_REQUIRE_CHROMIUM") != "" {
		t.Fatal("no chromium, and SLUICE_REQUIRE_CHROMIUM is set")
	}
	t.Skip("no chromium")
	return ""
}

// runChromium runs headless Chromium with args and returns its standard
// output.
func runChromium(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	home := t.TempDir()
	all := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
		"--user-data-dir=" + filepath.Join(home, "profile")}, args...)
	cmd := exec.CommandContext(ctx, bin, all...)
	cmd.Env = append(os.Environ(), "HOME="+home)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// TestHTMLReportRendersInChromium renders the report of the known traffic,
// compared with another configuration, in headless Chromium, and reads
// the DOM Chromium built: one plot per rule, red bars where the rule
// limited, the tables, and nothing that loads anything. A screenshot is
// kept in $SLUICE_TEST_ARTIFACTS when it is set.
func TestHTMLReportRendersInChromium(t *testing.T) {
	bin := chromium(t)
	cfg := loadTestConfig(t, "testdata/known.yaml")
	old := loadTestConfig(t, "testdata/live.yaml")
	hs := knownTraffic()
	rep, err := Run(context.Background(), Options{Config: cfg, ConfigName: "known.yaml", Against: old, AgainstName: "live.yaml",
		Logs: []string{"-"}, Stdin: bytes.NewReader(append(writeLog(t, Combined, hs), "not a line\n"...)), Suggest: true})
	if err != nil {
		t.Fatal(err)
	}
	var page bytes.Buffer
	if err := WriteHTML(&page, rep); err != nil {
		t.Fatal(err)
	}
	src := page.String()
	for _, loads := range []string{"<script", "<link", "<img", "<iframe", "src=", "href=", "url(", "@import", "@font-face"} {
		if strings.Contains(src, loads) {
			t.Errorf("the page has %q: it must load nothing", loads)
		}
	}
	dir := os.Getenv("SLUICE_TEST_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "replay-report.html")
	if err := os.WriteFile(file, page.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	dom := string(runChromium(t, bin, "--dump-dom", "file://"+file))

	plots := regexp.MustCompile(`<svg class="plot" data-rule="([^"]+)"`).FindAllStringSubmatch(dom, -1)
	if len(plots) != len(rep.Rules) {
		t.Fatalf("Chromium's DOM has %d plots; the report has %d rules", len(plots), len(rep.Rules))
	}
	for i, r := range rep.Rules {
		if plots[i][1] != r.Rule {
			t.Errorf("plot %d is of %q, want %q", i, plots[i][1], r.Rule)
		}
		section := dom[strings.Index(dom, `<section class="rule" id="rule-`+r.Rule+`"`):]
		section = section[:strings.Index(section, "</section>")]
		bars := strings.Count(section, `class="matched"`)
		red := strings.Count(section, `class="limited"`)
		if bars == 0 || (r.Limited > 0) != (red > 0) {
			t.Errorf("%s: %d bars, %d red; the rule limited %d", r.Rule, bars, red, r.Limited)
		}
		if r.Limited > 0 && !strings.Contains(section, "ip=192.0.2.") {
			t.Errorf("%s: the most limited clients are not listed", r.Rule)
		}
	}
	for _, want := range []string{`id="rules"`, `id="against"`, `id="unparsed"`, "p99.9", "not in the log format"} {
		if !strings.Contains(dom, want) {
			t.Errorf("the DOM lacks %q", want)
		}
	}
	shot := filepath.Join(dir, "replay-report.png")
	runChromium(t, bin, "--screenshot="+shot, "--window-size=1000,2400", "file://"+file)
	if st, err := os.Stat(shot); err != nil || st.Size() < 10000 {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
	t.Logf("the report and its screenshot: %s", dir)
}
