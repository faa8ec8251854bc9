package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clientip"
)

// rawUpstream is an upstream that answers each request with the next of
// its canned responses (the last one again once they run out) and records
// the request exactly as it arrived: its request line and its fields.
type rawUpstream struct {
	ln    net.Listener
	mu    sync.Mutex
	resps []string
	got   []rawRequest
	conns int // connections accepted
}

type rawRequest struct {
	line   string
	fields map[string][]string // by name as sent
}

func newRawUpstream(t *testing.T, resps ...string) *rawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{ln: ln, resps: resps}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.mu.Lock()
			u.conns++
			u.mu.Unlock()
			go u.serve(c)
		}
	}()
	return u
}

func (u *rawUpstream) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		req := rawRequest{line: strings.TrimRight(line, "\r\n"), fields: map[string][]string{}}
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				return
			}
			l = strings.TrimRight(l, "\r\n")
			if l == "" {
				break
			}
			k, v, _ := strings.Cut(l, ":")
			req.fields[k] = append(req.fields[k], strings.TrimSpace(v))
		}
		u.mu.Lock()
		u.got = append(u.got, req)
		resp := u.resps[min(len(u.got), len(u.resps))-1]
		u.mu.Unlock()
		if _, err := io.WriteString(c, resp); err != nil {
			return
		}
	}
}

func (u *rawUpstream) last(t *testing.T) rawRequest {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.got) == 0 {
		t.Fatal("the upstream received no request")
	}
	return u.got[len(u.got)-1]
}

// bothPaths returns the proxy to u with the direct path and the same proxy
// with the general path only, each behind a real server.
func bothPaths(t *testing.T, u *rawUpstream, opts Options) map[string]string {
	t.Helper()
	target, _ := url.Parse("http://" + u.ln.Addr().String())
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	out := map[string]string{}
	for _, name := range []string{"direct", "general"} {
		p := New(target, opts)
		if name == "general" {
			p.pool = nil
		} else if p.pool == nil {
			t.Fatal("no direct path to a plain-HTTP upstream")
		}
		srv := httptest.NewServer(p)
		t.Cleanup(srv.Close)
		out[name] = srv.URL
	}
	return out
}

// exchange sends a raw request to the server at base and returns its raw
// response's status line, fields and body.
func exchange(t *testing.T, base, req string) (status string, fields map[string][]string, body string) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	method, _, _ := strings.Cut(req, " ")
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	fields = map[string][]string{}
	for k, v := range resp.Header {
		if k != "Date" {
			fields[k] = v
		}
	}
	for k, v := range resp.Trailer {
		fields["Trailer:"+k] = v
	}
	return resp.Status, fields, string(b)
}

// The direct path sends the upstream what the general one sends (less
// the Accept-Encoding http.Transport adds) and answers the client as it
// does: hop-by-hop fields and those the Connection field names are
// dropped both ways, forwarding fields are replaced or extended, Te:
// trailers is kept, 1xx responses are passed on, trailers arrive.
func TestDirectPathMatchesGeneralPath(t *testing.T) {
	ok := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\nConnection: X-Up-Hop\r\nX-Up-Hop: a\r\nKeep-Alive: timeout=5\r\nProxy-Authenticate: Basic\r\nX-Up: 1\r\nX-Up: 2\r\n\r\n{\"ok\":true}"
	for _, tc := range []struct {
		name    string
		trusted string // the proxies trusted, or "" for none
		host    HostMode
		req     string
		resp    string
	}{
		{"plain GET", "", HostPreserve, "GET /api/search?q=x HTTP/1.1\r\nHost: api.example.com\r\nX-Api-Key: k1\r\nUser-Agent: wrk\r\n\r\n", ok},
		{"forged forwarding fields", "", HostPreserve, "GET /a HTTP/1.1\r\nHost: api.example.com\r\nX-Forwarded-For: 1.2.3.4\r\nX-Forwarded-Host: evil\r\nX-Forwarded-Proto: https\r\nForwarded: for=1.2.3.4\r\nX-Real-IP: 1.2.3.4\r\n\r\n", ok},
		{"trusted forwarding fields", "127.0.0.1/32", HostPreserve, "GET /a HTTP/1.1\r\nHost: api.example.com\r\nX-Forwarded-For: 1.2.3.4\r\nX-Forwarded-For: 5.6.7.8\r\nX-Forwarded-Host: public.example\r\nX-Forwarded-Proto: https\r\nForwarded: for=1.2.3.4\r\nX-Real-IP: 1.2.3.4\r\n\r\n", ok},
		{"upstream host", "", HostUpstream, "GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n", ok},
		{"hop-by-hop request fields", "", HostPreserve, "GET /a HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, X-Secret\r\nX-Secret: s\r\nKeep-Alive: 300\r\nProxy-Authorization: Basic x\r\nProxy-Connection: keep-alive\r\nTe: trailers, deflate\r\nTrailer: X-T\r\n\r\n", ok},
		{"escaped path and empty query", "", HostPreserve, "GET /a%2Fb/c%20d? HTTP/1.1\r\nHost: h\r\n\r\n", ok},
		{"HEAD", "", HostPreserve, "HEAD /a HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 42\r\n\r\n"},
		{"OPTIONS", "", HostPreserve, "OPTIONS /a HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.1 204 No Content\r\nAllow: GET\r\n\r\n"},
		{"HTTP/1.0 without Host", "", HostPreserve, "GET /a HTTP/1.0\r\n\r\n", ok},
		{"early hints", "", HostPreserve, "GET /a HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n" + ok},
		// With a Content-Type: without one, whether the general path
		// sniffs one depends on whether its timer flushes the header
		// before the body's first write.
		{"chunked with trailers", "", HostPreserve, "GET /a HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n5\r\nhello\r\n0\r\nX-Sum: 42\r\n\r\n"},
		{"upstream error status", "", HostPreserve, "GET /a HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\nRetry-After: 7\r\n\r\ndown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newRawUpstream(t, tc.resp)
			opts := Options{Host: tc.host}
			if tc.trusted != "" {
				ip, err := clientip.New(clientip.Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix(tc.trusted)}})
				if err != nil {
					t.Fatal(err)
				}
				opts.ClientIP = ip
			}
			urls := bothPaths(t, u, opts)
			var reqs [2]rawRequest
			var status [2]string
			var fields [2]map[string][]string
			var body [2]string
			for i, name := range []string{"direct", "general"} {
				status[i], fields[i], body[i] = exchange(t, urls[name], tc.req)
				reqs[i] = u.last(t)
			}
			delete(reqs[1].fields, "Accept-Encoding") // http.Transport's own, undone on the way back
			if reqs[0].line != reqs[1].line {
				t.Errorf("request line: direct %q, general %q", reqs[0].line, reqs[1].line)
			}
			if !equalFields(reqs[0].fields, reqs[1].fields) {
				t.Errorf("upstream fields:\ndirect  %q\ngeneral %q", reqs[0].fields, reqs[1].fields)
			}
			if status[0] != status[1] || body[0] != body[1] || !equalFields(fields[0], fields[1]) {
				t.Errorf("response:\ndirect  %s %q %q\ngeneral %s %q %q", status[0], fields[0], body[0], status[1], fields[1], body[1])
			}
			for _, k := range []string{"Connection", "X-Up-Hop", "Keep-Alive", "Proxy-Authenticate"} {
				if v, ok := fields[0][k]; ok {
					t.Errorf("the client got the upstream's hop-by-hop %s %q", k, v)
				}
			}
		})
	}
}

func equalFields(a, b map[string][]string) bool {
	return len(a) == len(b) && func() bool {
		for k, v := range a {
			if !slices.Equal(v, b[k]) {
				return false
			}
		}
		return true
	}()
}

// Requests with a body, upgrades and methods that may not be sent twice
// go the general path.
func TestDirectPathTakesOnlyReplayableBodilessRequests(t *testing.T) {
	get := func(method, target string, body io.Reader, hdr map[string]string) *http.Request {
		r := httptest.NewRequest(method, target, body)
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
		return r
	}
	for _, tc := range []struct {
		name string
		r    *http.Request
		want bool
	}{
		{"GET", get("GET", "/a", nil, nil), true},
		{"HEAD", get("HEAD", "/a", nil, nil), true},
		{"OPTIONS", get("OPTIONS", "/a", nil, nil), true},
		{"GET with a body", get("GET", "/a", strings.NewReader("x"), nil), false},
		{"POST", get("POST", "/a", nil, nil), false},
		{"DELETE", get("DELETE", "/a", nil, nil), false},
		{"upgrade", get("GET", "/ws", nil, map[string]string{"Connection": "Upgrade", "Upgrade": "websocket"}), false},
		{"asterisk", get("OPTIONS", "*", nil, nil), false},
	} {
		if got := direct(tc.r); got != tc.want {
			t.Errorf("%s: direct %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A kept-alive connection that the upstream closed while it was idle is
// replaced, and the request sent again, without the client noticing; a
// connection is reused otherwise.
func TestDirectPathRetriesAStaleConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var (
		mu    sync.Mutex
		conns int
	)
	const answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns++
			n := conns
			mu.Unlock()
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for i := 0; ; i++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					req.Body.Close()
					// The first connection serves one request, then
					// closes without a word once the next arrives.
					if n == 1 && i == 1 {
						return
					}
					io.WriteString(c, answer)
				}
			}()
		}
	}()
	target, _ := url.Parse("http://" + ln.Addr().String())
	p := New(target, Options{Logger: slog.New(slog.DiscardHandler)})
	for i := range 3 {
		w := httptest.NewRecorder()
		p.ServeHTTP(w, httptest.NewRequest("GET", "/a", nil))
		if w.Code != 200 || w.Body.String() != "ok" {
			t.Fatalf("request %d: %d %q, want 200 ok", i, w.Code, w.Body.String())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if conns != 2 {
		t.Errorf("%d upstream connections, want 2: the stale one and its replacement, reused", conns)
	}
}

// A response without a length, or of server-sent events, reaches the
// client as it comes, not when it ends.
func TestDirectPathFlushesStreams(t *testing.T) {
	for _, ct := range []string{"text/event-stream; charset=utf-8", ""} {
		t.Run("content-type "+ct, func(t *testing.T) {
			more := make(chan struct{})
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if ct != "" {
					w.Header().Set("Content-Type", ct)
				}
				io.WriteString(w, "data: one\n\n")
				w.(http.Flusher).Flush()
				<-more
				io.WriteString(w, "data: two\n\n")
			}))
			defer up.Close()
			defer close(more)
			target, _ := url.Parse(up.URL)
			p := New(target, Options{Logger: slog.New(slog.DiscardHandler)})
			srv := httptest.NewServer(p)
			defer srv.Close()
			resp, err := http.Get(srv.URL + "/events")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			line, err := bufio.NewReader(resp.Body).ReadString('\n')
			if err != nil || line != "data: one\n" {
				t.Fatalf("first event: %q %v, want it before the stream ends", line, err)
			}
		})
	}
}

// An upstream that does not answer in time gets the client a 504, on the
// direct path as on the general one; an upstream that refuses the
// connection a 502.
func TestDirectPathFailures(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := closed.Addr().String()
	closed.Close()
	for _, tc := range []struct {
		addr string
		want int
		kind string
	}{
		{silent.Addr().String(), http.StatusGatewayTimeout, kindTimeout},
		{refused, http.StatusBadGateway, kindRefused},
	} {
		var kinds []string
		target, _ := url.Parse("http://" + tc.addr)
		p := New(target, Options{Logger: slog.New(slog.DiscardHandler), ResponseHeaderTimeout: 50 * time.Millisecond,
			OnFailure: func(k string) { kinds = append(kinds, k) }})
		w := httptest.NewRecorder()
		p.ServeHTTP(w, httptest.NewRequest("GET", "/a", nil))
		if w.Code != tc.want || !slices.Equal(kinds, []string{tc.kind}) {
			t.Errorf("%s: %d %q, want %d [%s]", tc.addr, w.Code, kinds, tc.want, tc.kind)
		}
	}
}

// A client that goes away ends the exchange: the upstream connection is
// closed, not put back half read, and nothing is answered.
func TestDirectPathClientGone(t *testing.T) {
	accepted := make(chan net.Conn, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	target, _ := url.Parse("http://" + ln.Addr().String())
	var kinds []string
	// An hour: only the client's departure may end the wait, whenever it
	// comes (once, the response header timeout could overwrite it).
	p := New(target, Options{Logger: slog.New(slog.DiscardHandler), ResponseHeaderTimeout: time.Hour,
		OnFailure: func(k string) { kinds = append(kinds, k) }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	w := httptest.NewRecorder()
	go func() {
		defer close(done)
		p.ServeHTTP(w, httptest.NewRequest("GET", "/a", nil).WithContext(ctx))
	}()
	c := <-accepted
	defer c.Close()
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	if w.Body.Len() != 0 || !slices.Equal(kinds, []string{kindClientAborted}) {
		t.Errorf("answered %d %q, failures %q; want nothing and [%s]", w.Code, w.Body.String(), kinds, kindClientAborted)
	}
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("the upstream connection: read %v, want EOF (closed)", err)
	}
	if n := len(p.pool.idle); n != 0 {
		t.Errorf("%d idle connections, want 0", n)
	}
}

// Once a reload has replaced the proxy (CloseIdleConnections), its idle
// connections are closed, and so is a connection whose request was in
// flight, once that request ends.
func TestDirectPathCloseIdleConnections(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
	}))
	defer up.Close()
	target, _ := url.Parse(up.URL)
	p := New(target, Options{Logger: slog.New(slog.DiscardHandler)})
	p.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/fast", nil))
	if n := len(p.pool.idle); n != 1 {
		t.Fatalf("%d idle connections after a request, want 1", n)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/slow", nil))
	}()
	for { // wait until the slow request has taken the idle connection
		p.pool.mu.Lock()
		n := len(p.pool.idle)
		p.pool.mu.Unlock()
		if n == 0 {
			break
		}
		runtime.Gosched()
	}
	p.CloseIdleConnections()
	close(release)
	<-done
	if n := len(p.pool.idle); n != 0 {
		t.Errorf("%d idle connections after CloseIdleConnections and the request in flight, want 0", n)
	}
}
