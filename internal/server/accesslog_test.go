package server_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/server"
)

// accessLines parses every line of the files as JSON and counts them by
// rule and outcome.
func accessLines(t *testing.T, files ...string) (map[string]int, []map[string]any) {
	t.Helper()
	counts := map[string]int{}
	var all []map[string]any
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("%s: line %q is not JSON: %v", f, sc.Text(), err)
			}
			if _, err := time.Parse(time.RFC3339Nano, m["time"].(string)); err != nil {
				t.Errorf("time %v: %v", m["time"], err)
			}
			counts[fmt.Sprintf("%s/%s", m["rule"], m["outcome"])]++
			all = append(all, m)
		}
	}
	return counts, all
}

// The access log has one JSON line per rule decision, whose counts match
// the metrics, with keys hashed, in a file that rotates by size and is
// reopened on reload (SIGHUP).
func TestAccessLog(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	o := adminOptions()
	o.AccessLog = &server.AccessLogOptions{Output: path, MaxSize: 4000, MaxBackups: 20}
	r, g := startGW(t, o)
	hammer(t, r.url, "k-loud", 20, "k-a", "k-b")
	get(t, "GET", r.url+"/login", nil)

	files, _ := filepath.Glob(path + "*")
	if len(files) < 2 {
		t.Errorf("files %v: want the log rotated at 4000 bytes", files)
	}
	counts, lines := accessLines(t, files...)
	for _, ro := range []string{"api/allowed", "api/limited", "login/allowed"} {
		rule, outcome, _ := strings.Cut(ro, "/")
		want, _ := strconv.Atoi(metric(t, r.admin, fmt.Sprintf(`sluice_decisions_total{outcome=%q,rule=%q}`, outcome, rule)))
		if counts[ro] != want || want == 0 {
			t.Errorf("%s: %d lines, metrics count %d", ro, counts[ro], want)
		}
	}
	for _, l := range lines {
		if l["rule"] != "api" {
			continue
		}
		if _, raw := l["key"]; raw || l["key_hash"] == "" || l["client"] != "127.0.0.1" || l["face"] != "gateway" {
			t.Fatalf("line %v: want a key_hash and no key, client 127.0.0.1, face gateway", l)
		}
		if l["outcome"] == "limited" && (l["remaining"] != 0.0 || l["retry_after"] == nil || l["limit"] != 2.0) {
			t.Errorf("refusal %v: want remaining 0, limit 2 and a retry_after", l)
		}
	}
	b, _ := os.ReadFile(path)
	if strings.Contains(string(b), "k-loud") {
		t.Errorf("the log holds a raw key")
	}

	// logrotate moves the file and sends SIGHUP: the log goes on in a new
	// file.
	if err := os.Rename(path, path+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := g.Reload(func() (server.Options, error) { return o, nil }); err != nil {
		t.Fatal(err)
	}
	get(t, "GET", r.url+"/login", nil)
	if counts, _ := accessLines(t, path); counts["login/allowed"] != 1 || len(counts) != 1 {
		t.Errorf("after the reopen the new file has %v, want one login/allowed line", counts)
	}
}

// The access log writes at most lines_per_second lines a second and counts
// the others.
func TestAccessLogIsRateLimited(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	o := adminOptions()
	o.AccessLog = &server.AccessLogOptions{Output: path, LinesPerSecond: 5}
	r, _ := startGW(t, o)
	allowed(t, r.url+"/api", "k", 20)
	counts, lines := accessLines(t, path)
	n := counts["api/allowed"] + counts["api/limited"]
	dropped, _ := strconv.Atoi(metric(t, r.admin, "sluice_access_log_suppressed_total"))
	if n+dropped != 20 || n < 5 {
		t.Errorf("%d lines and %d dropped, want 20 in all, at least 5 of them written", n, dropped)
	}
	// The limit holds in each second of the clock, which the 20 requests
	// may straddle (more so on a loaded machine): each line's time, the
	// one its limit was checked at, tells its second.
	perSecond := map[int64]int{}
	for _, l := range lines {
		at, _ := time.Parse(time.RFC3339Nano, l["time"].(string))
		perSecond[at.Unix()]++
	}
	for sec, k := range perSecond {
		if k > 5 {
			t.Errorf("%d lines in the second %s, want at most 5", k, time.Unix(sec, 0).UTC().Format(time.RFC3339))
		}
	}
}
