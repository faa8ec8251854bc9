package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
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

// Proxy returns a reverse proxy to target that appends the client's address
// to X-Forwarded-For and answers 502 with a problem document when the
// upstream cannot be reached. It copies response bodies through pooled
// buffers: without them every response allocates 32 KiB, and the garbage
// collector of a small gateway process runs hundreds of times a second.
func Proxy(target *url.URL, log *slog.Logger) *httputil.ReverseProxy {
	transport := &http.Transport{
		Proxy: nil, // never route upstream traffic through an environment proxy
		DialContext: (&net.Dialer{
			Timeout:   5 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
		},
		Transport:  transport,
		BufferPool: bufferPool{},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, r.Context().Err()) {
				return // the client went away
			}
			log.LogAttrs(r.Context(), slog.LevelError, "upstream failed", slog.String("upstream", target.Redacted()), slog.Any("error", err))
			body := fmt.Sprintf(`{"type":"about:blank","title":"Bad Gateway","status":502,"detail":%q}`+"\n", "the upstream could not be reached")
			w.Header().Set("Content-Type", "application/problem+json")
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, body)
		},
	}
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

// legacyFields are the rate-limit fields that hold one number each.
var legacyFields = [...]string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"}

// oneValue wraps an upstream so that a legacy rate-limit field that both
// Sluice and the upstream set keeps only Sluice's value, which comes first:
// two numbers in a field meant to hold one would leave clients guessing.
// The IETF RateLimit and RateLimit-Policy fields are lists, and keep both
// Sluice's and the upstream's policies.
func oneValue(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(&singleValued{ResponseWriter: w}, r)
	})
}

// singleValued trims the legacy fields to their first value before the
// header is written. Unwrap lets http.ResponseController reach the
// connection (flushing, upgrades).
type singleValued struct {
	http.ResponseWriter
	trimmed bool
}

func (s *singleValued) WriteHeader(code int) {
	s.trim()
	s.ResponseWriter.WriteHeader(code)
}

func (s *singleValued) Write(b []byte) (int, error) {
	s.trim()
	return s.ResponseWriter.Write(b)
}

func (s *singleValued) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *singleValued) trim() {
	if s.trimmed {
		return
	}
	s.trimmed = true
	h := s.ResponseWriter.Header()
	for _, k := range legacyFields {
		if v := h[k]; len(v) > 1 {
			h[k] = v[:1]
		}
	}
}
