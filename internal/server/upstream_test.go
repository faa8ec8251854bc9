package server_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/server"
)

// seen is what an upstream received.
type seen struct {
	host   string
	header http.Header
}

// recordingUpstream is a real upstream server that reports the Host and
// headers of each request it receives.
func recordingUpstream(t *testing.T) (*httptest.Server, chan seen) {
	t.Helper()
	ch := make(chan seen, 16)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ch <- seen{r.Host, r.Header.Clone()}
	}))
	t.Cleanup(up.Close)
	return up, ch
}

func resolver(t *testing.T, cidr string) *clientip.Resolver {
	t.Helper()
	r, err := clientip.New(clientip.Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix(cidr)}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var perIP = []httplimit.Rule{{Name: "per-ip", Limit: fixed(1000, time.Hour)}}

// What the upstream receives: behind a trusted proxy, the client's
// forwarding headers extended by this hop and its Host; from an untrusted
// peer, headers that describe only the connection the gateway saw.
func TestGatewayForwardingHeaders(t *testing.T) {
	sent := map[string]string{
		"Host":              "api.example.com",
		"X-Forwarded-For":   "203.0.113.9",
		"X-Forwarded-Proto": "https",
		"X-Forwarded-Host":  "public.example.com",
		"Forwarded":         "for=203.0.113.9;proto=https",
		"X-Real-IP":         "203.0.113.9",
	}
	for _, tc := range []struct {
		name    string
		trusted string
		host    proxy.HostMode
		want    map[string]string
	}{
		{"trusted peer", "127.0.0.1/32", proxy.HostPreserve, map[string]string{
			"Host":              "api.example.com",
			"X-Forwarded-For":   "203.0.113.9, 127.0.0.1",
			"X-Forwarded-Proto": "https",
			"X-Forwarded-Host":  "public.example.com",
			"Forwarded":         "for=203.0.113.9;proto=https, for=127.0.0.1;host=api.example.com;proto=http",
			"X-Real-IP":         "203.0.113.9",
		}},
		{"untrusted peer", "10.0.0.0/8", proxy.HostPreserve, map[string]string{
			"Host":              "api.example.com",
			"X-Forwarded-For":   "127.0.0.1",
			"X-Forwarded-Proto": "http",
			"X-Forwarded-Host":  "api.example.com",
			"Forwarded":         "for=127.0.0.1;host=api.example.com;proto=http",
			"X-Real-IP":         "",
		}},
		{"upstream host", "127.0.0.1/32", proxy.HostUpstream, map[string]string{
			"Host":            "", // the upstream's own address, checked below
			"X-Forwarded-For": "203.0.113.9, 127.0.0.1",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up, got := recordingUpstream(t)
			ip := resolver(t, tc.trusted)
			g := start(t, server.Options{Upstream: up.URL, Proxy: proxy.Options{Host: tc.host},
				Limiter: httplimit.Options{ClientIP: ip, Rules: perIP}})
			req, _ := http.NewRequest("GET", g.url+"/x", nil)
			for k, v := range sent {
				req.Header.Set(k, v)
			}
			req.Host = sent["Host"]
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			s := <-got
			for k, want := range tc.want {
				v := s.header.Get(k)
				if k == "Host" {
					v = s.host
					if want == "" {
						want = strings.TrimPrefix(up.URL, "http://")
					}
				}
				if v != want {
					t.Errorf("upstream %s: got %q, want %q", k, v, want)
				}
			}
		})
	}
}

// An upstream that never answers gets 504 within the response header
// timeout, as a problem document, counted as a timeout.
func TestGatewayUpstreamTimeout(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer up.Close()
	defer close(release)
	g := start(t, server.Options{Upstream: up.URL, Proxy: proxy.Options{ResponseHeaderTimeout: 200 * time.Millisecond},
		Limiter: httplimit.Options{Rules: perIP}})
	began := time.Now()
	r := get(t, "GET", g.url+"/slow", nil)
	if took := time.Since(began); took > 20*time.Second {
		t.Errorf("answered after %v; the upstream never answers, the timeout is 200ms", took)
	}
	if r.StatusCode != http.StatusGatewayTimeout || r.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("status %d, Content-Type %q; want 504 with a problem document", r.StatusCode, r.Header.Get("Content-Type"))
	}
	var p struct{ Status int }
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil || p.Status != 504 {
		t.Errorf("problem: %+v, %v", p, err)
	}
	if got := metric(t, g.admin, `sluice_upstream_errors_total{kind="timeout"}`); got != "1" {
		t.Errorf("timeouts counted: %q, want 1", got)
	}
}

// A client that sends its body a byte at a time is cut off by the read
// timeout (408), and the upstream never gets a whole request.
func TestGatewaySlowBodyCutOff(t *testing.T) {
	var mu sync.Mutex
	complete := 0
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n, err := io.Copy(io.Discard, r.Body); err == nil && n == 1000 {
			mu.Lock()
			complete++
			mu.Unlock()
		}
	}))
	defer up.Close()
	g := start(t, server.Options{Upstream: up.URL, ReadTimeout: 300 * time.Millisecond, Limiter: httplimit.Options{Rules: perIP}})
	c, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST /upload HTTP/1.1\r\nHost: gw\r\nContent-Length: 1000\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// Write a byte every 50ms: 1000 bytes would take 50 s.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := c.Write([]byte{'x'}); err != nil {
					return
				}
			}
		}
	}()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("no answer to the slow body: %v", err)
	}
	if !strings.HasPrefix(line, "HTTP/1.1 408") {
		t.Errorf("status line %q, want 408; log:\n%s", line, g.logs.String())
	}
	if got := metric(t, g.admin, `sluice_upstream_errors_total{kind="client_timeout"}`); got != "1" {
		t.Errorf("client timeouts counted: %q, want 1", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if complete != 0 {
		t.Errorf("the upstream received %d complete bodies, want none", complete)
	}
}

// Against a dead upstream, failures are answered 502, every one is counted
// by kind, and the log gets at most LogLinesPerSecond lines a second.
func TestGatewayDeadUpstreamLogThrottled(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close() // nothing listens there: connections are refused
	const perSecond, requests = 3, 200
	g := start(t, server.Options{Upstream: dead, Proxy: proxy.Options{LogLinesPerSecond: perSecond},
		Limiter: httplimit.Options{Rules: perIP}})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for range requests / 4 {
				if r := get(t, "GET", g.url+"/", nil); r.StatusCode != http.StatusBadGateway {
					t.Errorf("worker %d: status %d, want 502", w, r.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	if got := metric(t, g.admin, `sluice_upstream_errors_total{kind="refused"}`); got != fmt.Sprint(requests) {
		t.Errorf("refusals counted: %q, want %d", got, requests)
	}
	lines := map[string]int{} // per second of the log's time
	total := 0
	for _, line := range strings.Split(g.logs.String(), "\n") {
		var rec struct {
			Time  time.Time
			Msg   string
			Level string
		}
		if json.Unmarshal([]byte(line), &rec) != nil || rec.Msg != "upstream failed" {
			continue
		}
		lines[rec.Time.Truncate(time.Second).String()]++
		total++
	}
	for sec, n := range lines {
		if n > perSecond {
			t.Errorf("%d upstream failure lines in the second %s, want at most %d", n, sec, perSecond)
		}
	}
	if total == 0 {
		t.Error("no upstream failure logged")
	}
	if got := metric(t, g.admin, `sluice_log_suppressed_total`); got != fmt.Sprint(requests-total) {
		t.Errorf("suppressed lines: %q, want %d", got, requests-total)
	}
}

// A client that goes away in the middle of its upload is not an upstream
// failure: counted as client_aborted, never logged at ERROR.
func TestGatewayAbortedUploadIsNotAnUpstreamFailure(t *testing.T) {
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		io.Copy(io.Discard, r.Body)
		<-release // an upstream that answers only once it has the whole body
	}))
	defer up.Close()
	defer close(release)
	g := start(t, server.Options{Upstream: up.URL, Limiter: httplimit.Options{Rules: perIP}})
	c, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "POST /upload HTTP/1.1\r\nHost: gw\r\nContent-Length: 100000\r\n\r\n"+strings.Repeat("x", 1000))
	<-arrived // the upload is under way upstream
	// The client stops sending (as a client whose upload is aborted
	// does), then goes away.
	c.(*net.TCPConn).CloseWrite()
	defer c.Close()
	eventually(t, func() bool { return metric(t, g.admin, `sluice_upstream_errors_total{kind="client_aborted"}`) == "1" },
		func() string { return "client_aborted never counted; log: " + g.logs.String() })
	for _, k := range []string{"reset", "other", "timeout", "refused"} {
		if got := metric(t, g.admin, `sluice_upstream_errors_total{kind="`+k+`"}`); got != "0" {
			t.Errorf("upstream errors of kind %s: %q, want 0", k, got)
		}
	}
	if logs := g.logs.String(); strings.Contains(logs, `"level":"ERROR"`) {
		t.Errorf("an aborted upload was logged as an error:\n%s", logs)
	}
}

// A request that waited out a delay rule still has the whole read timeout
// to send its body: the wait does not count against it.
func TestGatewayDelayDoesNotEatReadTimeout(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%d %v", n, err)
	}))
	defer up.Close()
	g := start(t, server.Options{Upstream: up.URL, ReadTimeout: 300 * time.Millisecond, Limiter: httplimit.Options{Rules: []httplimit.Rule{{
		Name: "upload", Action: httplimit.Delay, MaxDelay: 10 * time.Second,
		Limit: sluice.Limit{Algorithm: sluice.GCRA, Count: 1, Period: 2 * time.Second},
	}}}})
	body := strings.Repeat("x", 256<<10) // more than the server buffers
	for i := range 2 {                   // the second waits about 2 s, well past the read timeout
		resp, err := http.Post(g.url+"/upload", "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(got) != fmt.Sprintf("%d <nil>", len(body)) {
			t.Errorf("upload %d: status %d, upstream read %q; want 200 and the whole body", i, resp.StatusCode, got)
		}
	}
}

// An upgraded connection (a WebSocket, say) outlives the read timeout,
// which bounds reading requests, not the conversation after an upgrade.
func TestGatewayUpgradeOutlivesReadTimeout(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "want Upgrade: echo", http.StatusBadRequest)
			return
		}
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "echo")
		w.WriteHeader(http.StatusSwitchingProtocols)
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		io.Copy(conn, brw) // echo until the client closes
	}))
	defer up.Close()
	g := start(t, server.Options{Upstream: up.URL, ReadTimeout: 200 * time.Millisecond, Limiter: httplimit.Options{Rules: perIP}})
	c, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v, want 101", resp, err)
	}
	// Past the read timeout, the upgraded connection still carries data
	// both ways. The timeout is a deadline the gateway sets on its real
	// socket, which only real time moves (no clock of Sluice's reaches it,
	// and a testing/synctest bubble cannot hold a real socket): the test
	// lets it pass. A loaded machine only makes the wait longer.
	time.Sleep(500 * time.Millisecond)
	if _, err := io.WriteString(c, "ping"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
		t.Errorf("echo after the read timeout: %q, %v; want ping", buf, err)
	}
}
