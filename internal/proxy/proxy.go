// Package proxy is the gateway's reverse proxy to the upstream: forwarding
// headers that a client cannot forge, timeouts answered as problem
// documents, failures counted by kind and logged within a rate limit, and
// pooled copy buffers; and Echo, the built-in upstream for trying Sluice
// without an API behind it.
package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/internal/loglimit"
	"github.com/sluicehq/sluice/internal/problem"
)

// Echo is the upstream "builtin:echo": it answers 200 with a JSON account
// of the request it saw (method, path, query, headers, client address and
// body size), so that Sluice can be tried without an API behind it. It reads
// at most 1 MiB of the body.
func Echo() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
		keys := make([]string, 0, len(r.Header))
		for k := range r.Header {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		headers := make(map[string]string, len(keys))
		for _, k := range keys {
			headers[k] = strings.Join(r.Header[k], ", ")
		}
		body := struct {
			Method     string            `json:"method"`
			Path       string            `json:"path"`
			Query      string            `json:"query,omitempty"`
			Host       string            `json:"host"`
			RemoteAddr string            `json:"remote_addr"`
			Headers    map[string]string `json:"headers"`
			BodyBytes  int64             `json:"body_bytes"`
		}{r.Method, r.URL.Path, r.URL.RawQuery, r.Host, r.RemoteAddr, headers, n}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(body)
	})
}

// HostMode says which Host header the upstream receives.
type HostMode uint8

const (
	// HostPreserve passes the client's Host on, as reverse proxies in front
	// of virtual hosts do: the upstream sees the name the client asked
	// for. The default.
	HostPreserve HostMode = iota
	// HostUpstream sends the host of the upstream URL.
	HostUpstream
)

// Options configure the reverse proxy to an upstream. The zero value
// is usable: every field has a production default.
type Options struct {
	// DialTimeout bounds connecting to the upstream (TCP, not TLS).
	// Default 5 s.
	DialTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for the upstream's response
	// headers once the request is sent; the answer is then 504. It does
	// not bound a response body, so streams (server-sent events) are not
	// cut. Default 60 s.
	ResponseHeaderTimeout time.Duration
	// IdleConnTimeout is how long an idle upstream connection is kept for
	// reuse. Default 90 s.
	IdleConnTimeout time.Duration
	// Host selects the Host header sent upstream. Default HostPreserve.
	Host HostMode
	// ClientIP says which peers are trusted proxies: their forwarding
	// headers are passed on and extended, anyone else's are replaced (see
	// New). Default: no peer is trusted.
	ClientIP *clientip.Resolver
	// Logger receives upstream failures, at most LogLinesPerSecond lines a
	// second. Default slog.Default().
	Logger *slog.Logger
	// LogLinesPerSecond bounds the failure log; negative logs none.
	// Default 10.
	LogLinesPerSecond int64

	// BodyTimeout, if positive, is the server's read timeout, counted
	// again when proxying starts: a request that waited out a delay rule
	// still gets the whole of it to send its body.
	BodyTimeout time.Duration
	// OnFailure, if set, is told the kind of every failure (one of
	// FailureKinds), for metrics.
	OnFailure func(kind string)
	// OnLogDropped, if set, is told of every log line the rate limit
	// suppressed.
	OnLogDropped func()
}

// CloseIdleConnections closes the proxy's idle connections to the
// upstream, for when a reload replaces it; connections in use finish their
// requests.
func (p *Proxy) CloseIdleConnections() {
	if t, ok := p.rp.Transport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
}

// New returns a reverse proxy to target.
//
// Forwarding headers: when the connection's peer is one of opts.ClientIP's
// trusted proxies, the upstream receives the incoming X-Forwarded-For with
// the peer appended, the incoming X-Forwarded-Proto and X-Forwarded-Host
// (or this connection's scheme and the request's Host when absent), and the
// incoming Forwarded elements followed by one for this hop
// (for=peer;host=Host;proto=scheme), and X-Real-IP as received. When the
// peer is not trusted, whatever the client sent is replaced:
// X-Forwarded-For is the peer, X-Forwarded-Proto this connection's scheme,
// X-Forwarded-Host the request's Host, Forwarded the one element for this
// hop, and X-Real-IP is removed. The Host
// header follows opts.Host.
//
// Failures are answered with an application/problem+json document: 504
// when the upstream did not connect or answer in time, 502 when it refused
// the connection, reset it or failed otherwise, 408 when the client's body
// did not arrive within the server's read timeout, and 400 when the client
// went away in the middle of its body (which is not an upstream failure
// and is not logged as one). Every failure is counted by kind; upstream
// failures are logged at ERROR, at most opts.LogLinesPerSecond lines a
// second.
//
// It copies response bodies through pooled buffers: without them every
// response allocates 32 KiB, and the garbage collector of a small gateway
// process runs hundreds of times a second.
func New(target *url.URL, opts Options) *Proxy {
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 5 * time.Second
	}
	if opts.ResponseHeaderTimeout <= 0 {
		opts.ResponseHeaderTimeout = 60 * time.Second
	}
	if opts.IdleConnTimeout <= 0 {
		opts.IdleConnTimeout = 90 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.LogLinesPerSecond == 0 {
		opts.LogLinesPerSecond = 10
	}
	p := &Proxy{
		target:    target,
		ip:        opts.ClientIP,
		host:      opts.Host,
		log:       opts.Logger,
		logs:      loglimit.Limit{Per: opts.LogLinesPerSecond},
		onFailure: opts.OnFailure,
		onDropped: opts.OnLogDropped,
		bodyTo:    opts.BodyTimeout,
	}
	transport := &http.Transport{
		Proxy: nil, // never route upstream traffic through an environment proxy
		DialContext: (&net.Dialer{
			Timeout:   opts.DialTimeout,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       opts.IdleConnTimeout,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: opts.ResponseHeaderTimeout,
		ExpectContinueTimeout: time.Second,
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:      p.rewrite,
		Transport:    transport,
		BufferPool:   bufferPool{},
		ErrorHandler: p.fail,
		// An upstream may answer a request whose body broke off (the
		// transport prefers a response to the error of sending the body):
		// the client's failure decides the answer.
		ModifyResponse: func(resp *http.Response) error {
			if cb, ok := resp.Request.Context().Value(bodyKey{}).(*clientBody); ok {
				if e := cb.err.Load(); e != nil {
					return e
				}
			}
			return nil
		},
		// Failures after the response headers (a body cut off midway) are
		// reported here, within the same log rate limit.
		ErrorLog: log.New(limitedWriter{p}, "", 0),
	}
	return p
}

// Proxy is a reverse proxy to one upstream. It is safe for concurrent use.
type Proxy struct {
	rp        *httputil.ReverseProxy
	target    *url.URL
	ip        *clientip.Resolver
	host      HostMode
	log       *slog.Logger
	logs      loglimit.Limit
	onFailure func(kind string)
	onDropped func()
	bodyTo    time.Duration
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Body != nil && r.Body != http.NoBody {
		cb := &clientBody{ReadCloser: r.Body}
		r = r.WithContext(context.WithValue(r.Context(), bodyKey{}, cb))
		r.Body = cb
		if p.bodyTo > 0 {
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(p.bodyTo))
		}
	}
	p.rp.ServeHTTP(w, r)
}

// clientBody marks the errors of reading a client's request body, so that
// a failure to send the request upstream can be told from the client's
// going away or being too slow, and remembers the first.
type clientBody struct {
	io.ReadCloser
	err atomic.Pointer[clientBodyError]
}

func (b *clientBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		e := &clientBodyError{err}
		b.err.CompareAndSwap(nil, e)
		return n, e
	}
	return n, err
}

// bodyKey is the request context key of a request's *clientBody.
type bodyKey struct{}

// clientBodyError is a failure to read the client's request body.
type clientBodyError struct{ err error }

func (e *clientBodyError) Error() string {
	return "reading the client's request body: " + e.err.Error()
}
func (e *clientBodyError) Unwrap() error { return e.err }

func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(p.target)
	if p.host == HostPreserve {
		pr.Out.Host = pr.In.Host
	}
	setForwarded(pr, p.ip)
}

// setForwarded sets the outbound request's forwarding headers (see
// NewProxy). ReverseProxy has removed the inbound ones from pr.Out. For a
// peer that is not a trusted proxy it allocates twice: the values' array
// and the Forwarded element.
func setForwarded(pr *httputil.ProxyRequest, ip *clientip.Resolver) {
	in, out := pr.In, pr.Out.Header
	scheme, proto := "http", protoHTTP
	if in.TLS != nil {
		scheme, proto = "https", protoHTTPS
	}
	peer, addr, hasPeer := peerOf(in.RemoteAddr)
	trusted := hasPeer && ip != nil && ip.Trusted(addr)

	vals := make([]string, 3) // X-Forwarded-For, X-Forwarded-Host, Forwarded
	if xff := in.Header["X-Forwarded-For"]; trusted && len(xff) > 0 {
		vals[0] = strings.Join(xff, ", ") + ", " + peer
	} else {
		vals[0] = peer
	}
	if hasPeer {
		out["X-Forwarded-For"] = vals[0:1:1]
	}
	vals[1] = in.Host
	out["X-Forwarded-Host"] = vals[1:2:2]
	out["X-Forwarded-Proto"] = proto
	if !trusted {
		delete(out, "X-Real-Ip") // a client's claim; only proxies' are passed on
	}
	if trusted {
		if v := in.Header["X-Forwarded-Proto"]; len(v) > 0 {
			out["X-Forwarded-Proto"] = v
		}
		if v := in.Header["X-Forwarded-Host"]; len(v) > 0 {
			out["X-Forwarded-Host"] = v
		}
	}

	var prior []string
	if trusted {
		prior = in.Header["Forwarded"]
	}
	n := len(peer) + len(in.Host) + 32
	for _, v := range prior {
		n += len(v) + 2
	}
	var b strings.Builder
	b.Grow(n)
	for _, v := range prior {
		b.WriteString(v)
		b.WriteString(", ")
	}
	if hasPeer {
		b.WriteString("for=")
		if addr.Is6() {
			b.WriteString(`"[`)
			b.WriteString(peer)
			b.WriteString(`]"`)
		} else {
			b.WriteString(peer)
		}
		b.WriteByte(';')
	}
	if in.Host != "" {
		b.WriteString("host=")
		writeForwardedValue(&b, in.Host)
		b.WriteByte(';')
	}
	b.WriteString("proto=")
	b.WriteString(scheme)
	vals[2] = b.String()
	out["Forwarded"] = vals[2:3:3]
}

// The X-Forwarded-Proto values for this connection's scheme, shared by
// every request: nothing writes to a request's header values in place.
var (
	protoHTTP  = []string{"http"}[:1:1]
	protoHTTPS = []string{"https"}[:1:1]
)

// peerOf returns the address of a connection's peer from RemoteAddr
// ("192.0.2.1:1234", "[2001:db8::1]:1234"), as text (without allocating,
// unless the address is IPv4-mapped IPv6) and parsed.
func peerOf(remote string) (string, netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return "", netip.Addr{}, false
	}
	a := ap.Addr()
	if a.Is4In6() {
		a = a.Unmap()
		return a.String(), a, true
	}
	host := remote[:strings.LastIndexByte(remote, ':')]
	if len(host) >= 2 && host[0] == '[' {
		host = host[1 : len(host)-1]
	}
	return host, a, true
}

// writeForwardedValue writes v as a Forwarded parameter value: a token as
// is, anything else as a quoted string (RFC 7239, section 4).
func writeForwardedValue(b *strings.Builder, v string) {
	token := v != ""
	for i := 0; i < len(v) && token; i++ {
		c := v[i]
		token = c > ' ' && c < 0x7f && !strings.ContainsRune("\"(),/:;<=>?@[\\]{}", rune(c))
	}
	if token {
		b.WriteString(v)
		return
	}
	b.WriteByte('"')
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(v[i])
	}
	b.WriteByte('"')
}

// The kinds of proxy failure, as sluice_upstream_errors_total labels them.
const (
	kindTimeout       = "timeout"        // the upstream did not connect or answer in time: 504
	kindRefused       = "refused"        // the upstream refused the connection: 502
	kindReset         = "reset"          // the upstream reset or closed the connection: 502
	kindUnreachable   = "unreachable"    // no route to the upstream, or its name did not resolve: 502
	kindOther         = "other"          // any other upstream failure: 502
	kindClientAborted = "client_aborted" // the client went away (or its body broke off): not the upstream's failure
	kindClientTimeout = "client_timeout" // the client's body did not arrive within the read timeout: 408
)

// errorKinds are every kind, so that each series exists from the start.
// FailureKinds are the kinds of failure, as Options.OnFailure is told
// them (and sluice_upstream_errors_total labels them).
var FailureKinds = [...]string{kindTimeout, kindRefused, kindReset, kindUnreachable, kindOther, kindClientAborted, kindClientTimeout}

// classify returns the kind of a proxy failure and the status to answer.
func classify(r *http.Request, err error) (kind string, status int) {
	// The client's failure, if its body broke off, comes first: the
	// transport may report it as the request's cancellation instead.
	if cb, ok := r.Context().Value(bodyKey{}).(*clientBody); ok {
		if e := cb.err.Load(); e != nil {
			err = e
		}
	}
	var bodyErr *clientBodyError
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &bodyErr) && isTimeout(bodyErr.err):
		return kindClientTimeout, http.StatusRequestTimeout
	case errors.As(err, &bodyErr):
		return kindClientAborted, http.StatusBadRequest
	case r.Context().Err() != nil:
		return kindClientAborted, http.StatusBadGateway
	case isTimeout(err):
		return kindTimeout, http.StatusGatewayTimeout
	case errors.Is(err, syscall.ECONNREFUSED):
		return kindRefused, http.StatusBadGateway
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return kindReset, http.StatusBadGateway
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH), errors.As(err, &dnsErr):
		return kindUnreachable, http.StatusBadGateway
	}
	return kindOther, http.StatusBadGateway
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// fail is the ReverseProxy's ErrorHandler.
func (p *Proxy) fail(w http.ResponseWriter, r *http.Request, err error) {
	kind, status := classify(r, err)
	if p.onFailure != nil {
		p.onFailure(kind)
	}
	var detail string
	switch kind {
	case kindClientAborted:
		if r.Context().Err() != nil {
			return // no one is listening
		}
		detail = "the request body broke off before it was complete"
		p.log.LogAttrs(r.Context(), slog.LevelDebug, "client went away while sending its request", slog.Any("error", err))
	case kindClientTimeout:
		detail = "the request body did not arrive in time"
		w.Header().Set("Connection", "close")
		p.log.LogAttrs(r.Context(), slog.LevelDebug, "client too slow sending its request", slog.Any("error", err))
	default:
		detail = "the upstream could not be reached"
		if status == http.StatusGatewayTimeout {
			detail = "the upstream did not answer in time"
		}
		if p.logs.Allow(time.Now()) {
			p.log.LogAttrs(r.Context(), slog.LevelError, "upstream failed", slog.String("upstream", p.target.Redacted()),
				slog.String("kind", kind), slog.Any("error", err))
		} else if p.onDropped != nil {
			p.onDropped()
		}
	}
	problem.Write(w, status, detail)
}

// limitedWriter is the ReverseProxy's ErrorLog: its lines go to the
// proxy's logger at WARN, within the proxy's log rate limit.
type limitedWriter struct{ p *Proxy }

func (l limitedWriter) Write(b []byte) (int, error) {
	if l.p.logs.Allow(time.Now()) {
		l.p.log.LogAttrs(context.Background(), slog.LevelWarn, strings.TrimSpace(string(b)), slog.String("upstream", l.p.target.Redacted()))
	} else if l.p.onDropped != nil {
		l.p.onDropped()
	}
	return len(b), nil
}

// copyBuffers holds the proxy's 32 KiB body-copying buffers.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// bufferPool is an httputil.BufferPool over copyBuffers.
type bufferPool struct{}

func (bufferPool) Get() []byte { return *copyBuffers.Get().(*[]byte) }

func (bufferPool) Put(b []byte) {
	if cap(b) >= 32<<10 {
		b = b[:32<<10]
		copyBuffers.Put(&b)
	}
}
