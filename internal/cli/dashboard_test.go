package cli_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/syncbuf"
)

// chromium returns the path of a headless Chromium, or skips the test
// when there is none (fails instead with SLUICE_REQUIRE_CHROMIUM=1, as in
// CI).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("SLUICE_REQUIRE_CHROMIUM") == "1" {
		t.Fatal("chromium is not installed, and SLUICE_REQUIRE_CHROMIUM=1")
	}
	t.Skip("chromium is not installed")
	return ""
}

// artifactDir returns where the test keeps its artifacts: under
// $SLUICE_ARTIFACTS when set, else the test's artifact directory (kept
// under the output directory with go test -artifacts).
func artifactDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("SLUICE_ARTIFACTS"); d != "" {
		dir := filepath.Join(d, t.Name())
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	return t.ArtifactDir()
}

// browse runs headless Chromium on url with args (such as --dump-dom),
// letting the page's scripts run for budget of virtual time, and returns
// its standard output.
func browse(t *testing.T, url string, budget time.Duration, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	all := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=" + strconv.Itoa(int(budget/time.Millisecond)),
		"--window-size=1280,900"}, args...)
	cmd := exec.CommandContext(ctx, chromium(t), append(all, url)...)
	var stdout, stderr syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// The dashboard, loaded in a real headless Chromium from a running sluice
// serve under traffic, shows the client hammering past its limit first
// among the api rule's most limited, and plots the rule's decisions; a
// screenshot is kept as the test's artifact.
func TestDashboardInChromium(t *testing.T) {
	chromium(t)
	gw, admin, tokenFile := serveAdmin(t)
	tok, _ := os.ReadFile(tokenFile)

	// Traffic: quiet clients and a loud one, then a steady trickle while
	// the browser looks (bounded: it stops with the test).
	for _, k := range []string{"k-a", "k-b", "k-c"} {
		send(t, gw+"/api", k)
	}
	for range 40 {
		send(t, gw+"/api", "k-loud")
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; i < 2000; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			send(t, gw+"/api", "k-loud")
		}
	})
	defer func() { close(stop); wg.Wait() }()

	page := admin + "/admin/v1/dashboard#token=" + strings.TrimSpace(string(tok))
	dom := browse(t, page, 8*time.Second, "--dump-dom")
	card := regexp.MustCompile(`(?s)<section class="rule" data-rule="api">.*?</section>`).FindString(dom)
	if card == "" {
		t.Fatalf("no card for rule api in the page:\n%s", dom)
	}
	first := regexp.MustCompile(`<tbody><tr><td class="key">([^<]*)</td><td class="n">(\d+)</td>`).FindStringSubmatch(card)
	if first == nil || first[1] != "k-loud" {
		t.Errorf("the most limited client shown is %v, want k-loud first:\n%s", first, card)
	} else if n, _ := strconv.Atoi(first[2]); n < 38 {
		t.Errorf("k-loud shown with %d refusals, want at least 38", n)
	}
	pts := regexp.MustCompile(`<svg[^>]*data-points="(\d+)"`).FindStringSubmatch(card)
	if pts == nil || pts[1] == "0" {
		t.Errorf("the plot has no points: %v", pts)
	}
	if lim := regexp.MustCompile(`<polyline class="limited" points="([^"]*)"`).FindStringSubmatch(card); lim == nil || strings.Count(lim[1], ",") < 300 {
		t.Errorf("the limited line has too few points: %v", lim)
	}
	if !strings.Contains(dom, "healthy") || !strings.Contains(dom, "store memory") {
		t.Errorf("the page does not show the store's health")
	}

	shot := filepath.Join(artifactDir(t), "dashboard.png")
	browse(t, page, 8*time.Second, "--screenshot="+shot)
	if st, err := os.Stat(shot); err != nil || st.Size() < 10_000 {
		t.Fatalf("screenshot %s: %v (%d bytes)", shot, err, sizeOf(st))
	}
	t.Logf("dashboard screenshot: %s", shot)

	// Without the token, the page asks for it and shows no data.
	resp, err := http.Get(admin + "/admin/v1/dashboard")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("the dashboard without a token: %d, want 401", resp.StatusCode)
	}
	dom = browse(t, admin+"/admin/v1/dashboard#token=not-the-token-at-all", 3*time.Second, "--dump-dom")
	if strings.Contains(dom, "k-loud") || !strings.Contains(dom, "That is not the admin token.") {
		t.Errorf("with a wrong token the page shows:\n%s", dom)
	}
}

func sizeOf(st os.FileInfo) int64 {
	if st == nil {
		return 0
	}
	return st.Size()
}

// send sends one request with the API key; a failure fails the test.
func send(t *testing.T, url, key string) {
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("X-API-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(fmt.Errorf("GET %s: %w", url, err))
		return
	}
	resp.Body.Close()
}
