// Package deploy_test checks the monitoring that deploy/ ships: the alert
// rules of deploy/prometheus with promtool, and the Grafana dashboard of
// deploy/grafana and the alerts' expressions against a real Prometheus
// scraping a real `sluice serve` under traffic.
package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/cli/clitest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/syncbuf"
)

const (
	alertsFile    = "prometheus/alerts.yaml"
	dashboardFile = "grafana/sluice.json"
)

// tool returns the path of a Prometheus binary (Debian's prometheus
// package). Without it the test is skipped, unless
// SLUICE_REQUIRE_PROMETHEUS=1 (as CI sets), which fails it instead.
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("SLUICE_REQUIRE_PROMETHEUS") == "1" {
			t.Fatalf("%s not found and SLUICE_REQUIRE_PROMETHEUS=1: %v", name, err)
		}
		t.Skipf("%s not installed: skipping (apt-get install prometheus; CI sets SLUICE_REQUIRE_PROMETHEUS=1 and never skips)", name)
	}
	return p
}

// TestAlertRules checks alerts.yaml with promtool and runs its unit tests,
// alerts_test.yaml.
func TestAlertRules(t *testing.T) {
	promtool := tool(t, "promtool")
	for _, args := range [][]string{
		{"check", "rules", alertsFile},
		{"test", "rules", "prometheus/alerts_test.yaml"},
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// dashboard is the part of a Grafana dashboard that the tests read.
type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	Targets    []struct {
		Datasource json.RawMessage `json:"datasource"`
		Expr       string          `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// panels returns every panel that shows data, rows' panels included.
func (d dashboard) panels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			out = append(out, p)
		}
	}
	walk(d.Panels)
	return out
}

// TestDashboardImportable: the dashboard names its data source only
// through its datasource variable, so that it imports into any Grafana as
// it is, and each data panel has a unique ID and at least one query.
func TestDashboardImportable(t *testing.T) {
	d := readDashboard(t)
	if d.Title == "" || d.UID == "" {
		t.Errorf("title %q, uid %q: want both", d.Title, d.UID)
	}
	hasVar := slices.ContainsFunc(d.Templating.List, func(v struct {
		Name  string `json:"name"`
		Type  string `json:"type"`
		Query any    `json:"query"`
	}) bool {
		return v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus"
	})
	if !hasVar {
		t.Error("no variable datasource of type datasource for prometheus")
	}
	const want = `{"type":"prometheus","uid":"${datasource}"}`
	compact := func(raw json.RawMessage) string {
		var b bytes.Buffer
		if err := json.Compact(&b, raw); err != nil {
			return string(raw)
		}
		return b.String()
	}
	ids := map[int]string{}
	ps := d.panels()
	if len(ps) < 10 {
		t.Errorf("got %d data panels, want the on-call's dozen or more", len(ps))
	}
	for _, p := range ps {
		if other, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share ID %d", p.Title, other, p.ID)
		}
		ids[p.ID] = p.Title
		if got := compact(p.Datasource); got != want {
			t.Errorf("panel %q: datasource %s, want %s", p.Title, got, want)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no query", p.Title)
		}
		for _, q := range p.Targets {
			if got := compact(q.Datasource); got != want {
				t.Errorf("panel %q: query datasource %s, want %s", p.Title, got, want)
			}
		}
	}
}

// eventually polls cond until it holds, failing t after the deadline with
// cond's last explanation. Prometheus scrapes and evaluates every second,
// so conditions on what it has seen hold within seconds; the deadline is
// generous for a loaded machine.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still not after 2 minutes: %s", what, why)
		}
		<-tick.C
	}
}

// prometheus is a Prometheus server started by the test.
type prometheus struct {
	url string
}

// startPrometheus runs Prometheus on a free loopback port, with its own
// data directory, scraping target every second and evaluating the rules
// of alerts.yaml every second, until the test ends.
func startPrometheus(t *testing.T, target string) *prometheus {
	t.Helper()
	bin := tool(t, "prometheus")
	rules, err := filepath.Abs(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	conf := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: sluice
    static_configs:
      - targets: [%q]
`, rules, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	// The port is free a moment before Prometheus takes it; if another
	// process takes it meanwhile, Prometheus exits and is started again.
	for attempt := 0; ; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		log := new(syncbuf.Buffer)
		cmd := exec.Command(bin,
			"--config.file="+filepath.Join(dir, "prometheus.yml"),
			"--storage.tsdb.path="+filepath.Join(dir, "data"),
			"--web.listen-address="+addr,
			"--log.level=warn")
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		p := &prometheus{url: "http://" + addr}
		ready := make(chan bool, 1)
		go func() {
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for range 600 {
				resp, err := http.Get(p.url + "/-/ready")
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						ready <- true
						return
					}
				}
				<-tick.C
			}
			ready <- false
		}()
		select {
		case ok := <-ready:
			if !ok {
				cmd.Process.Kill()
				t.Fatalf("Prometheus not ready within a minute:\n%s", log.String())
			}
			t.Cleanup(func() {
				cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-exited:
				case <-time.After(30 * time.Second):
					cmd.Process.Kill()
					<-exited
				}
			})
			return p
		case err := <-exited:
			if attempt == 2 {
				t.Fatalf("Prometheus exited: %v\n%s", err, log.String())
			}
		}
	}
}

// series runs an instant query and returns its result's series (label
// sets with their value), or the error Prometheus reported.
func (p *prometheus) query(q string) ([]map[string]string, error) {
	resp, err := http.PostForm(p.url+"/api/v1/query", url.Values{"query": {q}})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s", r.Error)
	}
	var out []map[string]string
	for _, s := range r.Data.Result {
		m := map[string]string{"": fmt.Sprint(s.Value[1])}
		for k, v := range s.Metric {
			m[k] = v
		}
		out = append(out, m)
	}
	return out, nil
}

// labelValues answers Grafana's label_values(SELECTOR, LABEL) through the
// series API.
func (p *prometheus) labelValues(selector, label string) ([]string, error) {
	resp, err := http.PostForm(p.url+"/api/v1/series", url.Values{"match[]": {selector}})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string              `json:"status"`
		Error  string              `json:"error"`
		Data   []map[string]string `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s", r.Error)
	}
	var out []string
	for _, s := range r.Data {
		if v := s[label]; v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out, nil
}

// has reports whether the query returns a series, and what it returned.
func (p *prometheus) has(q string) (bool, string) {
	s, err := p.query(q)
	if err != nil {
		return false, err.Error()
	}
	return len(s) > 0, fmt.Sprintf("%v", s)
}

// metricValue reads one sample of the sluice's own /metrics page (by the
// exact series as it prints it), without Prometheus.
func metricValue(t *testing.T, admin, series string) string {
	t.Helper()
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			return v
		}
	}
	return ""
}

const testConfig = `server:
  listen: 127.0.0.1:0
  admin: 127.0.0.1:0
upstream: %s
store:
  backend: redis
  on_error: local
  max_keys: 4                 # the local fallback fills up once Redis is gone
  redis: { url: %q }
identity:
  jwt:
    keys: [{ file: issuer.pem }]
    algorithms: [EdDSA]
rules:
  - { name: users, match: { path: /user/* }, key: [jwt:sub], algorithm: gcra, limit: 1000, period: 1s }
  - { name: slots, match: { path: /slow/* }, key: [global], concurrency: 50, lease: 20ms }
  - { name: api, match: { path: /api/* }, key: [header:X-Key], algorithm: fixed_window, limit: 2, period: 1m }
  - { name: broken, match: { path: /broken/* }, key: [ip], algorithm: gcra, limit: 1000, period: 1s }
service:
  grpc: 127.0.0.1:0
  descriptors: ratelimit
  on_store_error: on_error
`

// TestMonitoringAgainstPrometheus runs `sluice serve` (in this process)
// with a gateway, the rate-limit service and a Redis store, scraped every
// second by a real Prometheus that evaluates alerts.yaml, and sends it the
// traffic of every trouble the alerts are for: a rule refusing most
// requests, a descriptor over its limit, an upstream that breaks its
// connections, tokens that do not verify, slots outliving their lease, a
// reload and a refused one, Redis stopped (degraded decisions, evictions
// from the full fallback store), and finally sluice stopped. Every query
// of the dashboard (its variables substituted as Grafana would) and every
// expression of alerts.yaml must then return series.
func TestMonitoringAgainstPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Prometheus and Redis for about a minute")
	}
	tool(t, "prometheus")
	rdb := redistest.Start(t)

	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/slow/"):
			// A slow upstream: the response outlives the slots rule's
			// 20ms lease, so its slot is found lost at the end. The lease
			// runs on the Redis server's clock (TIME), which only real
			// time moves, in this run of real processes: the upstream
			// lets it pass. A loaded machine only makes the wait longer.
			time.Sleep(150 * time.Millisecond)
		case strings.HasPrefix(r.URL.Path, "/broken/"):
			// An upstream that drops the connection without answering.
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		io.WriteString(w, "ok\n")
	}))
	defer upstream.Close()

	dir := t.TempDir()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("issuer.pem", string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})))
	write("ratelimit/api.yaml", "domain: api\ndescriptors:\n  - key: client\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n")
	config := fmt.Sprintf(testConfig, upstream.URL, rdb.URL())
	write("sluice.yaml", config)

	sluice := clitest.Start(t, filepath.Join(dir, "sluice.yaml"), "--log-format", "json")
	gateway, admin := sluice.Gateway, sluice.Admin
	grpcAddr := sluice.Listening()["grpc"]
	if grpcAddr == "" {
		t.Fatalf("no gRPC address in the log:\n%s", sluice.Stderr.String())
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlsv3.NewRateLimitServiceClient(conn)

	prom := startPrometheus(t, strings.TrimPrefix(admin, "http://"))

	client := &http.Client{Timeout: 10 * time.Second}
	get := func(path string, header ...string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, gateway+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	ask := func(client string) {
		t.Helper()
		_, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
			Domain: "api",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "client", Value: client}},
			}},
		})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
	}
	traffic := func(n int) {
		t.Helper()
		for range n {
			get("/api/orders", "X-Key", "k1")
			get("/user/me", "Authorization", "Bearer not-a-token")
			ask("acme")
		}
		for range max(n/10, 1) {
			get("/broken/x")
			get("/slow/x")
		}
	}

	// Each counter's series must be seen by Prometheus before most of
	// its traffic: a rate is measured between samples, and the first
	// sample of a series is its first count.
	traffic(3)
	for _, q := range []string{
		`sluice_decisions_total{rule="api", outcome="limited"}`,
		`sluice_rls_decisions_total{domain="api", outcome="limited"}`,
		`sluice_identity_tokens_total{result="malformed"} > 0`,
		`sluice_upstream_errors_total{kind!~"client_.*"} > 0`,
		`sluice_leases_lost_total{rule="slots"} > 0`,
	} {
		eventually(t, "Prometheus has "+q, func() (bool, string) { return prom.has(q) })
	}
	traffic(1000) // over a second each for the 5 minutes the alerts look back

	// A reload, and a refused one (the running configuration stays).
	write("sluice.yaml", config+"# changed\n")
	eventually(t, "a successful reload", func() (bool, string) {
		v := metricValue(t, admin, `sluice_config_reloads_total{result="success"}`)
		return v == "1", "success count " + v
	})
	write("sluice.yaml", config+"rules_typo: []\n")
	eventually(t, "a refused reload", func() (bool, string) {
		v := metricValue(t, admin, `sluice_config_reloads_total{result="failure"}`)
		return v == "1", "failure count " + v
	})

	// Redis goes away: decisions follow on_error, on the local fallback,
	// whose four entries cannot hold every client.
	// The store's circuit opens on failed calls: requests keep coming.
	rdb.Stop()
	eventually(t, "the store degraded", func() (bool, string) {
		get("/api/orders", "X-Key", "k1")
		v := metricValue(t, admin, "sluice_store_degraded")
		return v == "1", "sluice_store_degraded " + v
	})
	for i := range 20 {
		get("/api/orders", "X-Key", fmt.Sprintf("client-%d", i))
		ask(fmt.Sprintf("client-%d", i))
	}
	if v := metricValue(t, admin, "sluice_evicted_keys_total"); v == "0" || v == "" {
		t.Fatalf("sluice_evicted_keys_total %q after 20 clients on a store of 4 keys", v)
	}

	// Every query of the dashboard, and every expression of the rules but
	// the one about a stopped target, returns series.
	d := readDashboard(t)
	vars := map[string]string{"$__rate_interval": "30s", "$__interval": "5s"}
	for _, name := range []string{"job", "instance"} {
		q := ""
		for _, v := range d.Templating.List {
			if v.Name == name {
				if m, ok := v.Query.(map[string]any); ok {
					q, _ = m["query"].(string)
				}
			}
		}
		m := regexp.MustCompile(`^label_values\((.+), *(\w+)\)$`).FindStringSubmatch(expand(q, vars))
		if m == nil {
			t.Fatalf("variable %s: query %q is not label_values(SELECTOR, LABEL)", name, q)
		}
		var values []string
		eventually(t, "variable "+name, func() (bool, string) {
			values, err = prom.labelValues(m[1], m[2])
			return len(values) > 0, fmt.Sprint(err)
		})
		for i, v := range values {
			// As Grafana escapes a multi-value variable for Prometheus:
			// a regular expression inside a PromQL string.
			values[i] = strings.ReplaceAll(regexp.QuoteMeta(v), `\`, `\\`)
		}
		vars["$"+name] = strings.Join(values, "|")
	}
	var exprs []string
	for _, p := range d.panels() {
		for _, q := range p.Targets {
			exprs = append(exprs, expand(q.Expr, vars))
		}
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Record, Expr string
			}
		}
	}
	data, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatal(err)
	}
	var down string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "SluiceTargetDown" {
				down = r.Expr
				continue
			}
			exprs = append(exprs, r.Expr)
		}
	}
	if down == "" {
		t.Fatal("no alert SluiceTargetDown")
	}
	for _, q := range exprs {
		if _, err := prom.query(q); err != nil {
			t.Errorf("%s: %v", q, err) // a query Prometheus refuses never returns series
			continue
		}
		eventually(t, "series for "+q, func() (bool, string) { return prom.has(q) })
	}

	// sluice stops: its target is down.
	sluice.Stop()
	eventually(t, "series for "+down, func() (bool, string) { return prom.has(down) })
}

// expand substitutes Grafana's variables in a query.
func expand(q string, vars map[string]string) string {
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	// Longer names first: $instance before $in..., $__rate_interval
	// before $__interval.
	slices.SortFunc(keys, func(a, b string) int { return len(b) - len(a) })
	for _, k := range keys {
		q = strings.ReplaceAll(q, k, vars[k])
	}
	return q
}
