package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/redisstore"
)

// running is a gateway served on loopback ports for one test.
type running struct {
	url, admin string
	logs       *syncBuffer
	stop       func() error  // shutdown, waits for Run, then Close
	shutdown   func()        // begins the shutdown: Run's context ends
	stopped    chan struct{} // closed when Run has returned runErr
	runErr     error
}

type syncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{} // closed by the next Write; nil until waitFor needs it
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// waitFor returns once cond holds of the log, which it checks after every
// write. It fails t if that takes a minute: a safeguard against a hang,
// never a wait for time to pass.
func (b *syncBuffer) waitFor(t *testing.T, what string, cond func(log string) bool) {
	t.Helper()
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	for {
		b.mu.Lock()
		log := b.b.String()
		if b.changed == nil {
			b.changed = make(chan struct{})
		}
		changed := b.changed
		b.mu.Unlock()
		if cond(log) {
			return
		}
		select {
		case <-changed:
		case <-timeout.C:
			t.Fatalf("waited a minute for %s; log:\n%s", what, log)
		}
	}
}

// eventually polls cond until it holds, failing t with what() after a
// minute. It is for conditions that come true with no event to wait for:
// a Redis that has come back, a metric a gateway's goroutine counts, a
// listener it closes, overrides another gateway polls. The bound is a
// safeguard against a hang, never a wait for time to pass.
func eventually(t *testing.T, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute: %s", what())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// logLines counts the JSON log lines of log at level with message msg.
func logLines(log, level, msg string) int {
	n := 0
	for line := range strings.Lines(log) {
		var l struct{ Level, Msg string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Level == level && l.Msg == msg {
			n++
		}
	}
	return n
}

// start serves a gateway on loopback ports (the options' own, if set) for
// the test, logging at INFO into running.logs.
func start(t *testing.T, opts server.Options) *running {
	t.Helper()
	r, _ := launch(t, opts, slog.LevelInfo)
	return r
}

// launch is start, logging at level, and returns the gateway too; each of
// prepare is called with it before it runs.
func launch(t *testing.T, opts server.Options, level slog.Level, prepare ...func(*server.Server)) (*running, *server.Server) {
	t.Helper()
	logs := &syncBuffer{}
	opts.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: level}))
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	if opts.Admin == "" {
		opts.Admin = "127.0.0.1:0"
	}
	if opts.Upstream == "" {
		opts.Upstream = server.EchoUpstream
	}
	g, err := server.New(opts)
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	for _, f := range prepare {
		f(g)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan [2]net.Addr, 1)
	r := &running{logs: logs, shutdown: cancel, stopped: make(chan struct{})}
	go func() {
		r.runErr = g.Run(ctx, func(l, a net.Addr) { addrs <- [2]net.Addr{l, a} })
		close(r.stopped)
	}()
	select {
	case a := <-addrs:
		r.url, r.admin = "http://"+a[0].String(), "http://"+a[1].String()
	case <-r.stopped:
		t.Fatalf("Run: %v", r.runErr)
	}
	var once sync.Once
	r.stop = func() error {
		once.Do(func() {
			cancel()
			<-r.stopped
			g.Close()
		})
		return r.runErr
	}
	t.Cleanup(func() { r.stop() })
	return r, g
}

func get(t *testing.T, method, url string, header map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp
}

func metric(t *testing.T, admin, series string) string {
	t.Helper()
	resp := get(t, "GET", admin+"/metrics", nil)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			return v
		}
	}
	return ""
}

func fixed(n int64, p time.Duration) sluice.Limit {
	return sluice.Limit{Algorithm: sluice.FixedWindow, Count: n, Period: p}
}

func TestGatewayLimitsOverRealHTTP(t *testing.T) {
	upstreamSaw := make(chan http.Header, 10)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamSaw <- r.Header.Clone()
		w.Header().Set("X-Upstream", "yes")
		io.WriteString(w, "hello")
	}))
	defer up.Close()
	g := start(t, server.Options{Upstream: up.URL, Limiter: httplimit.Options{Rules: []httplimit.Rule{
		{Name: "health", Match: httplimit.Match{Paths: []string{"/healthz"}}, Action: httplimit.Exempt},
		{Name: "login", Match: httplimit.Match{Paths: []string{"/login"}, Methods: []string{"POST"}},
			Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Count: 2, Period: time.Minute}},
		{Name: "cheap", Match: httplimit.Match{Paths: []string{"/login"}}, Action: httplimit.Soft, Limit: fixed(1, time.Hour)},
	}}})

	r := get(t, "POST", g.url+"/login", nil)
	if r.StatusCode != 200 || r.Header.Get("X-Upstream") != "yes" {
		t.Fatalf("first login: status %d, X-Upstream %q; want 200 from the upstream", r.StatusCode, r.Header.Get("X-Upstream"))
	}
	if got := r.Header.Get("RateLimit"); !strings.HasPrefix(got, `"login";r=1;t=`) {
		t.Errorf("RateLimit: got %q, want login with 1 remaining", got)
	}
	h := <-upstreamSaw
	if h.Get("X-Forwarded-For") != "127.0.0.1" {
		t.Errorf("upstream X-Forwarded-For: got %q, want 127.0.0.1", h.Get("X-Forwarded-For"))
	}
	if h.Get("Sluice-Over-Limit") != "" {
		t.Errorf("first request marked over the soft limit: %q", h.Get("Sluice-Over-Limit"))
	}
	r = get(t, "POST", g.url+"/login", map[string]string{"Sluice-Over-Limit": "forged"})
	if r.StatusCode != 200 {
		t.Fatalf("second login: status %d", r.StatusCode)
	}
	if h := <-upstreamSaw; h.Get("Sluice-Over-Limit") != "cheap" {
		t.Errorf("upstream Sluice-Over-Limit: got %q, want cheap", h.Get("Sluice-Over-Limit"))
	}
	r = get(t, "POST", g.url+"/login", nil)
	if r.StatusCode != 429 {
		t.Fatalf("third login: status %d, want 429", r.StatusCode)
	}
	var p map[string]any
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
		t.Fatalf("429 body: %v", err)
	}
	if p["status"] != 429.0 || p["retry_after"] == nil {
		t.Errorf("problem: %v", p)
	}
	for range 3 {
		if r := get(t, "GET", g.url+"/healthz", nil); r.StatusCode != 200 {
			t.Errorf("exempt /healthz: status %d", r.StatusCode)
		}
	}

	for series, want := range map[string]string{
		`sluice_decisions_total{outcome="allowed",rule="login"}`:      "2",
		`sluice_decisions_total{outcome="limited",rule="login"}`:      "1",
		`sluice_decisions_total{outcome="soft_limited",rule="cheap"}`: "1",
		`sluice_decisions_total{outcome="exempt",rule="health"}`:      "3",
		`sluice_requests_total{outcome="limited"}`:                    "1",
		`sluice_decision_duration_seconds_count`:                      "6",
		`sluice_live_keys`:                                            "2",
		`sluice_max_keys`:                                             "1e+06",
		`sluice_evicted_keys_total`:                                   "0",
	} {
		if got := metric(t, g.admin, series); got != want {
			t.Errorf("%s: got %q, want %q", series, got, want)
		}
	}
	if logs := g.logs.String(); !strings.Contains(logs, `"level":"WARN","msg":"request rejected by rate limit","rule":"login","key":"`) || strings.Contains(logs, "127.0.0.1/32") {
		t.Errorf("rejection log must name the rule and a hashed key, never the address:\n%s", logs)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if r := get(t, "GET", g.admin+path, nil); r.StatusCode != 200 {
			t.Errorf("admin %s: status %d", path, r.StatusCode)
		}
	}
}

// TestGatewayEvictionMetrics fills a gateway's in-memory store past its
// max_keys with live state and checks that the metrics say so: the cap, the
// entries held, and the live entries evicted.
func TestGatewayEvictionMetrics(t *testing.T) {
	g := start(t, server.Options{MaxKeys: 64, Limiter: httplimit.Options{Rules: []httplimit.Rule{
		{Name: "per-user", Key: []httplimit.KeyPart{httplimit.Header("X-User")}, Limit: fixed(1, time.Hour)},
	}}})
	const users = 100
	for i := range users {
		if r := get(t, "GET", g.url+"/", map[string]string{"X-User": fmt.Sprint("user-", i)}); r.StatusCode != 200 {
			t.Fatalf("user %d: status %d", i, r.StatusCode)
		}
	}
	num := func(series string) int {
		t.Helper()
		v, err := strconv.ParseFloat(metric(t, g.admin, series), 64)
		if err != nil {
			t.Fatalf("%s: %v", series, err)
		}
		return int(v)
	}
	// 64 shards of one entry each: every user past the first in a shard
	// evicts the shard's live entry.
	live, evicted := num("sluice_live_keys"), num("sluice_evicted_keys_total")
	if got := num("sluice_max_keys"); got != 64 {
		t.Errorf("sluice_max_keys = %d, want 64", got)
	}
	if live > 64 || evicted < users-64 || live+evicted != users {
		t.Errorf("sluice_live_keys = %d, sluice_evicted_keys_total = %d; want at most 64 live, and together %d", live, evicted, users)
	}
}

func TestGatewaySpoofedForwardedForChangesNothing(t *testing.T) {
	proxies, err := clientip.ParsePrefixes([]string{"10.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	trusted, err := clientip.New(clientip.Options{TrustedProxies: proxies})
	if err != nil {
		t.Fatal(err)
	}
	g := start(t, server.Options{Limiter: httplimit.Options{ClientIP: trusted, Rules: []httplimit.Rule{
		{Name: "per-ip", Limit: fixed(2, time.Hour)},
	}}})
	codes := ""
	for i := range 4 {
		// Each request claims to come from another address; the peer
		// (127.0.0.1) is not a trusted proxy, so the claims are ignored.
		r := get(t, "GET", g.url+"/", map[string]string{
			"X-Forwarded-For": "203.0.113." + string(rune('1'+i)),
			"Forwarded":       "for=198.51.100." + string(rune('1'+i)),
		})
		codes += r.Status[:3] + " "
	}
	if codes != "200 200 429 429 " {
		t.Errorf("statuses: got %q, want the spoofing client limited as itself", codes)
	}
}

func TestGatewayDelayDelaysThenPasses(t *testing.T) {
	g := start(t, server.Options{Limiter: httplimit.Options{Rules: []httplimit.Rule{{
		Name: "export", Action: httplimit.Delay, MaxDelay: time.Second,
		Limit: sluice.Limit{Algorithm: sluice.GCRA, Count: 1, Period: 300 * time.Millisecond},
	}}}})
	get(t, "GET", g.url+"/export", nil)
	startAt := time.Now()
	r := get(t, "GET", g.url+"/export", nil)
	waited := time.Since(startAt)
	if r.StatusCode != 200 {
		t.Fatalf("delayed request: status %d, want 200", r.StatusCode)
	}
	// The second request's turn comes one emission interval after the
	// first; it cannot be served sooner.
	if waited < 200*time.Millisecond {
		t.Errorf("second request served after %v, want it held for about 300ms", waited)
	}
	if got := metric(t, g.admin, `sluice_requests_total{outcome="delayed"}`); got != "1" {
		t.Errorf("delayed requests: got %q, want 1", got)
	}
}

func TestGatewayShadowNeverBlocks(t *testing.T) {
	g := start(t, server.Options{Limiter: httplimit.Options{Rules: []httplimit.Rule{{
		Name: "global-writes", Key: []httplimit.KeyPart{httplimit.Global()}, Action: httplimit.Shadow, Limit: fixed(1, time.Hour),
	}}}})
	for range 5 {
		if r := get(t, "POST", g.url+"/", nil); r.StatusCode != 200 {
			t.Fatalf("shadow-limited request: status %d, want 200", r.StatusCode)
		}
	}
	if got := metric(t, g.admin, `sluice_decisions_total{outcome="shadow_limited",rule="global-writes"}`); got != "4" {
		t.Errorf("shadow_limited: got %q, want 4", got)
	}
}

func TestGatewayMalformedRequests(t *testing.T) {
	g := start(t, server.Options{MaxHeaderBytes: 4 << 10, Limiter: httplimit.Options{Rules: []httplimit.Rule{
		{Name: "by-key", Key: []httplimit.KeyPart{httplimit.Header("X-API-Key")}, Limit: fixed(100, time.Hour)},
	}}})
	r := get(t, "GET", g.url+"/", map[string]string{"X-API-Key": strings.Repeat("k", 64<<10)})
	if r.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("huge header: status %d, want 431", r.StatusCode)
	}
	for _, xff := range []string{"not-an-ip", "999.1.1.1", "[::1", strings.Repeat("1.2.3.4, ", 500)} {
		if r := get(t, "GET", g.url+"/", map[string]string{"X-Forwarded-For": xff[:min(len(xff), 3000)]}); r.StatusCode != 200 {
			t.Errorf("X-Forwarded-For %.20q: status %d, want 200", xff, r.StatusCode)
		}
	}
	// A raw request with a bad request line gets 400, and the gateway keeps serving.
	c, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GARBAGE\r\n\r\n")
	line, _ := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if !strings.Contains(line, "400") {
		t.Errorf("bad request line: got %q, want 400", line)
	}
	if r := get(t, "GET", g.url+"/", nil); r.StatusCode != 200 {
		t.Errorf("after bad input: status %d", r.StatusCode)
	}
}

func TestGatewayGracefulShutdown(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		io.WriteString(w, "finished")
	}))
	defer up.Close()
	g := start(t, server.Options{Upstream: up.URL, Limiter: httplimit.Options{Rules: []httplimit.Rule{{Name: "r", Limit: fixed(10, time.Minute)}}}})
	result := make(chan string, 1)
	go func() {
		resp, err := http.Get(g.url + "/slow")
		if err != nil {
			result <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		result <- string(b)
	}()
	<-arrived
	stopped := make(chan error, 1)
	go func() { stopped <- g.stop() }()
	// Shutting down: new connections are refused while the request in
	// flight is still served.
	eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", strings.TrimPrefix(g.url, "http://"), time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	}, func() string { return "the gateway still accepts connections after its shutdown began" })
	close(release)
	if got := <-result; got != "finished" {
		t.Errorf("request in flight: got %q, want it finished", got)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Run: %v", err)
	}
}

func TestTwoGatewaysShareOneRedisLimit(t *testing.T) {
	srv := redistest.Start(t)
	opts := func() server.Options {
		return server.Options{Backend: "redis", Redis: redisstore.Options{URL: srv.URL(), Timeout: 5 * time.Second}, Limiter: httplimit.Options{Rules: []httplimit.Rule{
			{Name: "per-key", Key: []httplimit.KeyPart{httplimit.Header("X-API-Key")}, Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Count: 25, Period: time.Hour}},
		}}}
	}
	a, b := start(t, opts()), start(t, opts())
	var mu sync.Mutex
	admitted := 0
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			url := a.url
			if i%2 == 1 {
				url = b.url
			}
			for range 10 {
				r := get(t, "GET", url+"/", map[string]string{"X-API-Key": "shared"})
				if r.StatusCode == 200 {
					mu.Lock()
					admitted++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if admitted != 25 {
		t.Errorf("two gateways admitted %d requests, want exactly the shared limit 25", admitted)
	}
	for _, g := range []*running{a, b} {
		if r := get(t, "GET", g.admin+"/readyz", nil); r.StatusCode != 200 {
			t.Errorf("readyz with Redis up: status %d", r.StatusCode)
		}
	}
	// Redis goes away: the default on_error (local) keeps limiting from
	// memory, /readyz says so, and the metrics count the degraded decisions.
	srv.Stop()
	for range 3 {
		if r := get(t, "GET", a.url+"/", map[string]string{"X-API-Key": "other"}); r.StatusCode != 200 {
			t.Errorf("with Redis down: status %d, want 200 from the local fallback", r.StatusCode)
		}
	}
	wantDegradedReady(t, a.admin)
	if !strings.Contains(a.logs.String(), "Redis failed; deciding per on_error") {
		t.Errorf("log with Redis down: want a warning that Redis failed, got %s", a.logs.String())
	}
	if got := metric(t, a.admin, `sluice_degraded_decisions_total{rule="per-key"}`); got != "3" {
		t.Errorf("degraded decisions: got %q, want 3", got)
	}
	if got := metric(t, a.admin, `sluice_store_errors_total{backend="redis"}`); got == "" || got == "0" {
		t.Errorf("store errors: got %q, want some", got)
	}
}

// Two gateways on one Redis decide every request's rules together: a
// request that one rule rejects is charged to none, even while other
// requests race it through the other server. 40 users, 3 requests each, at
// most 2 per user and 30 in all on a shared API key: exactly 30 pass, and
// afterwards every user has exactly the per-user quota its admitted requests
// left.
func TestTwoGatewaysChargeRejectedRequestsNothing(t *testing.T) {
	srv := redistest.Start(t)
	opts := func() server.Options {
		return server.Options{Backend: "redis", Redis: redisstore.Options{URL: "redis://" + srv.Addr, Timeout: 5 * time.Second}, Limiter: httplimit.Options{Rules: []httplimit.Rule{
			{Name: "per-user", Key: []httplimit.KeyPart{httplimit.Header("X-User")}, Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Count: 2, Period: time.Hour}},
			{Name: "per-key", Key: []httplimit.KeyPart{httplimit.Header("X-API-Key")}, Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Count: 30, Period: time.Hour}},
		}}}
	}
	a, b := start(t, opts()), start(t, opts())
	var admitted [40]int
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 15 {
				u := g*5 + i%5
				url := a.url
				if i%2 == 1 {
					url = b.url
				}
				r := get(t, "GET", url+"/", map[string]string{"X-User": fmt.Sprint("user-", u), "X-API-Key": "shared"})
				if r.StatusCode == 200 {
					admitted[u]++
				}
			}
		})
	}
	wg.Wait()
	total := 0
	for _, n := range admitted {
		total += n
	}
	if total != 30 {
		t.Fatalf("admitted %d requests, want exactly the shared key's 30", total)
	}
	for u, n := range admitted {
		r := get(t, "GET", a.url+"/", map[string]string{"X-User": fmt.Sprint("user-", u), "X-API-Key": fmt.Sprint("own-", u)})
		if want := n < 2; (r.StatusCode == 200) != want {
			t.Errorf("user-%d, %d admitted before: a request on its own key got %d, want admitted=%v", u, n, r.StatusCode, want)
		}
	}
}

// wantDegradedReady checks the readiness of a gateway whose Redis is down
// under on_error local: ready, saying it is degraded, since it and every
// gateway beside it still answer every request; not ready when the probe
// asks to be strict.
func wantDegradedReady(t *testing.T, admin string) {
	t.Helper()
	if r := get(t, "GET", admin+"/readyz", nil); r.StatusCode != 200 || !strings.Contains(readAll(r), "ready, degraded") {
		t.Errorf("readyz with Redis down under on_error local: status %d, want 200 saying degraded", r.StatusCode)
	}
	if r := get(t, "GET", admin+"/readyz?strict", nil); r.StatusCode != 503 {
		t.Errorf("readyz?strict with Redis down: status %d, want 503", r.StatusCode)
	}
}

// A gateway starts while Redis is down: it limits from memory (on_error
// local), says so in its log and /readyz, and moves to Redis by itself once
// Redis is up.
func TestGatewayStartsWithRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	g := start(t, server.Options{Backend: "redis", Redis: redisstore.Options{URL: srv.URL()}, Limiter: httplimit.Options{Rules: []httplimit.Rule{
		{Name: "per-key", Key: []httplimit.KeyPart{httplimit.Header("X-API-Key")}, Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Count: 2, Period: time.Hour}},
	}}})
	if !strings.Contains(g.logs.String(), "Redis unreachable at start") {
		t.Errorf("log: want a warning that Redis is unreachable, got %s", g.logs.String())
	}
	for i, want := range []int{200, 200, 429} {
		if r := get(t, "GET", g.url+"/", map[string]string{"X-API-Key": "k"}); r.StatusCode != want {
			t.Errorf("request %d with Redis down: status %d, want %d (the local fallback's limit)", i, r.StatusCode, want)
		}
	}
	wantDegradedReady(t, g.admin)
	srv.Restart(t)
	// The store connects in the background, about every second.
	eventually(t, func() bool { return get(t, "GET", g.admin+"/readyz?strict", nil).StatusCode == 200 },
		func() string { return "readyz?strict still failing with Redis up" })
	// Redis is charged with what the fallback admitted: the key stays at
	// its limit for the hour.
	if r := get(t, "GET", g.url+"/", map[string]string{"X-API-Key": "k"}); r.StatusCode != 429 {
		t.Errorf("request with Redis up: status %d, want 429", r.StatusCode)
	}
	if got := metric(t, g.admin, `sluice_store_degraded`); got != "0" {
		t.Errorf("sluice_store_degraded with Redis up: %q, want 0", got)
	}
}

// An upstream that sends rate-limit fields of its own: the legacy ones,
// which hold one number each, keep Sluice's value only; the IETF lists hold
// Sluice's policy and then the upstream's. Paths no rule matches pass the
// upstream's fields through untouched.
func TestGatewayUpstreamRateLimitFields(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-RateLimit-Limit", "999")
		w.Header().Set("X-RateLimit-Remaining", "998")
		w.Header().Set("RateLimit", `"app";r=998;t=1`)
		w.WriteHeader(http.StatusAccepted)
	}))
	defer up.Close()
	g := start(t, server.Options{Upstream: up.URL, Limiter: httplimit.Options{Rules: []httplimit.Rule{
		{Name: "api", Match: httplimit.Match{Paths: []string{"/api/*"}}, Limit: fixed(10, time.Minute)},
	}}})
	r := get(t, "GET", g.url+"/api/x", nil)
	if r.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d, want the upstream's 202", r.StatusCode)
	}
	if got := r.Header.Values("X-Ratelimit-Limit"); len(got) != 1 || got[0] != "10" {
		t.Errorf("X-RateLimit-Limit: %q, want Sluice's 10 alone", got)
	}
	if got := r.Header.Values("X-Ratelimit-Remaining"); len(got) != 1 || got[0] != "9" {
		t.Errorf("X-RateLimit-Remaining: %q, want Sluice's 9 alone", got)
	}
	if got := r.Header.Values("Ratelimit"); len(got) != 2 || !strings.HasPrefix(got[0], `"api";r=9;`) || got[1] != `"app";r=998;t=1` {
		t.Errorf("RateLimit: %q, want Sluice's policy, then the upstream's", got)
	}
	r = get(t, "GET", g.url+"/other", nil)
	if got := r.Header.Values("X-Ratelimit-Limit"); len(got) != 1 || got[0] != "999" {
		t.Errorf("unmatched path: X-RateLimit-Limit %q, want the upstream's 999", got)
	}
}

// A streamed answer (server-sent events) reaches the client as the upstream
// flushes it, through the gateway's wrapping of the response.
func TestGatewayStreams(t *testing.T) {
	second := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-second:
		case <-time.After(10 * time.Second):
		}
		io.WriteString(w, "data: two\n\n")
	}))
	defer up.Close()
	defer close(second)
	g := start(t, server.Options{Upstream: up.URL, Limiter: httplimit.Options{Rules: []httplimit.Rule{{Name: "r", Limit: fixed(10, time.Minute)}}}})
	// The client gives up well before the upstream would send the second
	// event by itself: only a flushed first event arrives in time.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", g.url+"/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, len("data: one\n\n"))
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "data: one\n\n" {
		t.Fatalf("first event: %q, %v; want it before the upstream sends the second", buf, err)
	}
}

// The metrics tell the build: version, revision and Go version.
func TestBuildInfo(t *testing.T) {
	g := start(t, server.Options{Upstream: server.EchoUpstream})
	resp := get(t, "GET", g.admin+"/metrics", nil)
	sc := bufio.NewScanner(resp.Body)
	found := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "sluice_build_info{") {
			found = true
			if !strings.Contains(line, `goversion="`+runtime.Version()+`"`) || !strings.Contains(line, `revision="`) || !strings.HasSuffix(line, " 1") {
				t.Errorf("build info %q: want the Go version %s, a revision and the value 1", line, runtime.Version())
			}
		}
	}
	if !found {
		t.Error("no sluice_build_info series")
	}
}
