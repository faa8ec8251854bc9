package replay

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/proxytest"
)

// nginxConfig is an nginx that answers every request itself and writes
// three access logs of them: nginx's combined format, the main format of
// nginx's own default nginx.conf (combined with X-Forwarded-For after it),
// and the JSON format docs/replay.md gives (%s, read from the page).
const nginxConfig = `worker_processes 1;
pid nginx.pid;
error_log stderr;
events { worker_connections 64; }
http {
	access_log off;
	client_body_temp_path client_body_temp;
	proxy_temp_path proxy_temp;
	fastcgi_temp_path fastcgi_temp;
	uwsgi_temp_path uwsgi_temp;
	scgi_temp_path scgi_temp;
	log_format main '$remote_addr - $remote_user [$time_local] "$request" '
		'$status $body_bytes_sent "$http_referer" '
		'"$http_user_agent" "$http_x_forwarded_for"';
	%s
	server {
		listen %s;
		access_log combined.log combined;
		access_log main.log main;
		access_log json.log sluice;
		location / { return 200 "ok\n"; }
	}
}
`

// nginxReplayConfig limits logins and the API per client address (client
// 127.0.1.3 is a proxy whose X-Forwarded-For is believed) and keys by an
// API key where the log has it. The limits are GCRA's over an hour, so
// that nothing is given back while the test runs, however slow.
const nginxReplayConfig = `upstream: builtin:echo
client_ip:
  trusted_proxies: [127.0.1.3/32]
rules:
  - name: login
    match: { path: /login, methods: [POST] }
    algorithm: gcra
    limit: 3
    period: 1h
  - name: api
    match: { path: /api/* }
    algorithm: gcra
    limit: 10
    period: 1h
  - name: keyed
    match: { path: /keys/* }
    key: [header:X-Api-Key]
    missing: skip
    algorithm: gcra
    limit: 1
    period: 1h
`

// proxyRule is what a rule of nginxReplayConfig counts of proxyTraffic:
// matched, admitted, limited, skipped, clients, and the limited requests
// of its most limited keys.
type proxyRule struct {
	matched, admitted, limited, skipped, clients int64
	top                                          map[string]int64
}

// The counts of proxyTraffic in a log that carries X-Forwarded-For and
// X-Api-Key (the main and JSON formats, Caddy's).
var proxyRulesAll = map[string]proxyRule{
	"login": {5, 3, 2, 0, 1, map[string]int64{"ip=127.0.1.2/32": 2}},
	"api":   {23, 20, 3, 0, 2, map[string]int64{"ip=127.0.1.1/32": 2, "ip=198.51.100.7/32": 1}},
	"keyed": {3, 1, 2, 0, 1, map[string]int64{"header:X-Api-Key=k-1": 2}},
}

// proxyTrafficLines is how many requests proxyTraffic sends, one of which
// no rule matches.
const proxyTrafficLines = 12 + 1 + 5 + 11 + 3

// proxyTraffic sends known requests to the proxy at addr from three
// loopback addresses: a client over the API's limit, one over the login
// limit, and a proxy (127.0.1.3) that forwards a client over the API's
// limit and an API key over its own. Each must be answered 200.
func proxyTraffic(t *testing.T, addr string) {
	t.Helper()
	// from returns a client whose connections come from 127.0.1.n.
	from := func(n int) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(n))}}
		return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
	}
	send := func(c *http.Client, method, path string, hdr ...string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s: the proxy answered %d", method, path, resp.StatusCode)
		}
	}
	c1, c2, c3 := from(1), from(2), from(3)
	for i := range 12 {
		send(c1, "GET", fmt.Sprintf("/api/items?page=%d", i), "User-Agent", `tester "one" \ two`)
	}
	send(c1, "GET", "/healthz")
	for range 5 {
		send(c2, "POST", "/login")
	}
	for range 11 {
		send(c3, "GET", "/api/a%20b", "X-Forwarded-For", "198.51.100.7")
	}
	for range 3 {
		send(c3, "GET", "/keys/x", "X-Forwarded-For", "198.51.100.7", "X-Api-Key", "k-1")
	}
}

// checkProxyLog replays the log at path with nginxReplayConfig and holds
// its report to proxyTraffic's lines and the rules' counts.
func checkProxyLog(t *testing.T, path string, f Format, rules map[string]proxyRule) {
	t.Helper()
	cfgPath := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(cfgPath, []byte(nginxReplayConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), Options{Config: cfg, Logs: []string{path}, Format: f, Tolerance: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Lines != proxyTrafficLines || rep.Unparsed != 0 || rep.Requests != proxyTrafficLines || rep.Unmatched != 1 {
		b, _ := os.ReadFile(path)
		t.Fatalf("lines %d, unparsed %d %v, requests %d, unmatched %d; want %d, 0, %d, 1. The log:\n%s",
			rep.Lines, rep.Unparsed, rep.UnparsedLines, rep.Requests, rep.Unmatched, proxyTrafficLines, proxyTrafficLines, b)
	}
	for _, rr := range rep.Rules {
		got := proxyRule{rr.Matched, rr.Admitted, rr.Limited, rr.Skipped, rr.Clients, map[string]int64{}}
		for _, c := range rr.Top {
			got.top[c.Key] = c.Limited
		}
		if want := rules[rr.Rule]; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("rule %s: got matched, admitted, limited, skipped, clients, top %v; want %v", rr.Rule, got, want)
		}
	}
	if len(rep.Rules) != len(rules) {
		t.Errorf("%d rules reported, want %d", len(rep.Rules), len(rules))
	}
}

// checkUserAgent parses the first line of the log at path and holds its
// User-Agent to the one proxyTraffic sent first, escaped by the proxy.
func checkUserAgent(t *testing.T, path string, p lineParser) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	var req Request
	if err := p.parse([]byte(first), &req); err != nil {
		t.Fatalf("%s: %q: %v", path, first, err)
	}
	if got, want := header(&req, "User-Agent"), `tester "one" \ two`; got != want {
		t.Errorf("%s: User-Agent %q from %q, want %q", path, got, first, want)
	}
}

// TestRealNginxLogs sends known requests through a real nginx and replays
// each of the access logs nginx wrote of them: every line is read, and
// each rule's counts and most limited keys are those the requests make,
// in each format as far as it carries the request (the combined format
// has no X-Forwarded-For and no API key).
func TestRealNginxLogs(t *testing.T) {
	nginx := proxytest.Need(t, "nginx", "/usr/sbin/nginx")
	doc, err := os.ReadFile("../../docs/replay.md")
	if err != nil {
		t.Fatal(err)
	}
	jsonFormat := regexp.MustCompile("(?s)```nginx\n(log_format sluice escape=json .*?;)\n```").FindSubmatch(doc)
	if jsonFormat == nil {
		t.Fatal("docs/replay.md gives no nginx log_format sluice")
	}
	dir := t.TempDir()
	addr := proxytest.FreeAddr(t)
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConfig, jsonFormat[1], addr), 0o644); err != nil {
		t.Fatal(err)
	}
	stop := proxytest.Start(t, exec.Command(nginx, "-p", dir, "-c", conf, "-e", "stderr", "-g", "daemon off;"), addr)
	proxyTraffic(t, addr)
	stop() // nginx writes each line as a request ends: all are written once it has stopped

	noHeaders := map[string]proxyRule{
		"login": proxyRulesAll["login"],
		"api":   {23, 20, 3, 0, 2, map[string]int64{"ip=127.0.1.1/32": 2, "ip=127.0.1.3/32": 1}},
		"keyed": {3, 0, 0, 3, 0, map[string]int64{}},
	}
	noKey := map[string]proxyRule{
		"login": proxyRulesAll["login"],
		"api":   proxyRulesAll["api"],
		"keyed": noHeaders["keyed"],
	}
	t.Run("combined", func(t *testing.T) { checkProxyLog(t, filepath.Join(dir, "combined.log"), Combined, noHeaders) })
	t.Run("main", func(t *testing.T) { checkProxyLog(t, filepath.Join(dir, "main.log"), Combined, noKey) })
	t.Run("json", func(t *testing.T) { checkProxyLog(t, filepath.Join(dir, "json.log"), JSON, proxyRulesAll) })
	// nginx escaped the user agent's quote and backslash in each format;
	// replay undid the escapes.
	checkUserAgent(t, filepath.Join(dir, "combined.log"), new(combinedParser))
	checkUserAgent(t, filepath.Join(dir, "json.log"), newJSONParser(JSONFields{}))
}

// caddyConfig is a Caddy that answers every request itself and logs each
// in its JSON access log.
const caddyConfig = `{
	admin off
	auto_https off
}
http://%s {
	log {
		output file %s
	}
	respond "ok" 200
}
`

// TestRealCaddyLogs sends known requests through a real Caddy and replays
// its access log: every line is read, and each rule's counts and most
// limited keys are those the requests make.
func TestRealCaddyLogs(t *testing.T) {
	caddy := proxytest.Need(t, "caddy")
	dir := t.TempDir()
	addr := proxytest.FreeAddr(t)
	conf, log := filepath.Join(dir, "Caddyfile"), filepath.Join(dir, "access.log")
	if err := os.WriteFile(conf, fmt.Appendf(nil, caddyConfig, addr, log), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(caddy, "run", "--config", conf, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	stop := proxytest.Start(t, cmd, addr)
	proxyTraffic(t, addr)
	stop()
	checkProxyLog(t, log, Caddy, proxyRulesAll)
	checkUserAgent(t, log, newCaddyParser())
}
