// Package forwardauth is Sluice's forward-auth endpoint: a reverse proxy that
// keeps its own proxying (Traefik's ForwardAuth, Caddy's forward_auth,
// nginx's auth_request) asks it, before forwarding a request, whether the
// request may pass, and Sluice answers with its HTTP rules.
//
// # What the proxy sends
//
// The proxy describes the original request in forwarding headers of the
// auth request, and copies the client's own headers beside them:
//
//   - X-Forwarded-Method: the method (required);
//   - X-Forwarded-Uri: the request target, "/path?query" (required; an
//     absolute URL is reduced to its path and query);
//   - X-Forwarded-Host: the Host (optional: without it the request has no
//     host, and rules that match hosts do not match it);
//   - X-Forwarded-Proto: "http" or "https" (optional, checked only);
//   - X-Forwarded-For: the client's address as the proxy saw it, appended
//     (required). Its last entry becomes the original request's
//     connection address and the entries before it its X-Forwarded-For, so
//     the limiter's own client_ip settings (its trusted proxies) walk the
//     chain in front of the proxy exactly as the gateway would.
//
// Every other header of the auth request (API keys, cookies, plans, and a
// Forwarded or X-Real-IP header written by proxies in front, which
// client_ip believes only when they are its trusted proxies) is the
// original request's, as the proxy copied it.
//
// # Trust
//
// These headers are believed only from the configured proxy addresses. Any
// other caller gets 403 Forbidden, whatever it sends: the endpoint has no
// request of its own worth limiting (its path and method are the proxy's
// plumbing, not the client's), and limiting such a caller "as itself" would
// silently wave through every request of a proxy whose address was left out
// of the list, with all its clients sharing one counter. A 403 makes that
// mistake loud at once, and gives a stranger nothing.
//
// # Answers
//
// 200 OK with an empty body lets the request through, with the rate-limit
// headers for the proxy to copy onto its response, and, when the request
// is over a Soft rule, the over-limit header for the proxy to copy onto the
// request it forwards. 429 Too Many Requests, with Retry-After, the
// rate-limit headers and a problem+json body, refuses it; 503 comes from a
// limiter that fails closed. A Delay rule holds the answer for the delay,
// which holds the proxied request: the proxy's timeout for the auth request
// must exceed the rules' max_delay. 400 Bad Request, with a problem+json
// body naming the header, answers forwarding headers that cannot describe
// a request: that is a broken proxy configuration, not a client to limit.
//
// A Handler is safe for concurrent use.
package forwardauth

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/internal/problem"
)

// Limits on the forwarding headers, in bytes. Longer values get 400.
const (
	MaxMethodLen = 64
	MaxURILen    = 8 << 10
	MaxHostLen   = 262 // a 255-byte name, a colon and a port
	MaxForLen    = 8 << 10
)

var (
	// ErrInvalidOptions reports Options that cannot work.
	ErrInvalidOptions = errors.New("forwardauth: invalid options")
	// ErrBadForward reports forwarding headers that describe no request.
	ErrBadForward = errors.New("forwardauth: bad forwarding headers")
)

// The forwarding headers, in canonical form.
const (
	headerMethod = "X-Forwarded-Method"
	headerURI    = "X-Forwarded-Uri"
	headerHost   = "X-Forwarded-Host"
	headerProto  = "X-Forwarded-Proto"
	headerFor    = "X-Forwarded-For"
)

// Options configure a Handler.
type Options struct {
	// TrustedProxies are the networks of the proxies allowed to call the
	// endpoint. Required: with none, nobody could.
	TrustedProxies []netip.Prefix
	// OverLimitHeader is the limiter's over-limit header
	// (httplimit.Options.OverLimitHeader), copied from the original
	// request onto the 200 answer for the proxy to pass on. Default
	// "Sluice-Over-Limit".
	OverLimitHeader string
}

// Handler is the forward-auth endpoint. Build one with New.
type Handler struct {
	limited   http.Handler
	ip        *clientip.Resolver
	overLimit string
}

// New returns the endpoint that runs described requests through limit,
// an httplimit.Limiter's Handler (or anything of its shape).
func New(limit func(http.Handler) http.Handler, opts Options) (*Handler, error) {
	if limit == nil {
		return nil, fmt.Errorf("%w: no limiter", ErrInvalidOptions)
	}
	if len(opts.TrustedProxies) == 0 {
		return nil, fmt.Errorf("%w: no trusted proxies: list the addresses of the proxies that call the endpoint", ErrInvalidOptions)
	}
	ip, err := clientip.New(clientip.Options{TrustedProxies: opts.TrustedProxies})
	if err != nil {
		return nil, fmt.Errorf("forwardauth: %w", err)
	}
	h := &Handler{ip: ip, overLimit: textproto.CanonicalMIMEHeaderKey(opts.OverLimitHeader)}
	if h.overLimit == "" {
		h.overLimit = "Sluice-Over-Limit"
	}
	h.limited = limit(http.HandlerFunc(h.admit))
	return h, nil
}

// admit answers 200 to a request the limiter let through (after any delay).
func (h *Handler) admit(w http.ResponseWriter, r *http.Request) {
	if v := r.Header[h.overLimit]; len(v) > 0 {
		w.Header()[h.overLimit] = v
	}
	w.Header()["Content-Length"] = []string{"0"}
	w.WriteHeader(http.StatusOK)
}

// ServeHTTP answers an auth request; see the package documentation.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	peer, ok := peerAddr(r.RemoteAddr)
	if !ok || !h.ip.Trusted(peer) {
		problem.Write(w, http.StatusForbidden, "forwardauth: the caller is not a trusted proxy; add its address to forward_auth.trusted_proxies")
		return
	}
	orig, err := Original(r)
	if err != nil {
		problem.Write(w, http.StatusBadRequest, err.Error())
		return
	}
	h.limited.ServeHTTP(w, orig)
}

func peerAddr(remote string) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap(), true
}

// Original rebuilds the request that the auth request r describes, for a
// caller already known to be trusted. The result shares r's context and
// copies its headers, less the forwarding headers it consumed. The error
// wraps ErrBadForward and names the offending header.
func Original(r *http.Request) (*http.Request, error) {
	method, err := single(r.Header, headerMethod, MaxMethodLen, true)
	if err != nil {
		return nil, err
	}
	if !isToken(method) {
		return nil, badf("%s %s is not an HTTP method", headerMethod, quote(method))
	}
	target, err := single(r.Header, headerURI, MaxURILen, true)
	if err != nil {
		return nil, err
	}
	u, err := parseTarget(target)
	if err != nil {
		return nil, err
	}
	host, err := single(r.Header, headerHost, MaxHostLen, false)
	if err != nil {
		return nil, err
	}
	if !validHost(host) {
		return nil, badf("%s %s is not a host", headerHost, quote(host))
	}
	proto, err := single(r.Header, headerProto, 16, false)
	if err != nil {
		return nil, err
	}
	switch strings.ToLower(proto) {
	case "", "http", "https", "ws", "wss":
	default:
		return nil, badf("%s %s: want http or https", headerProto, quote(proto))
	}
	remote, before, err := lastHop(r.Header[headerFor])
	if err != nil {
		return nil, err
	}

	hdr := make(http.Header, len(r.Header))
	for k, v := range r.Header {
		switch k {
		case headerMethod, headerURI, headerHost, headerProto, headerFor, "Content-Length", "Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Proxy-Connection":
			continue
		}
		hdr[k] = v
	}
	if before != "" {
		hdr[headerFor] = []string{before}
	}
	o := &http.Request{
		Method:     method,
		URL:        u,
		Proto:      r.Proto,
		ProtoMajor: r.ProtoMajor,
		ProtoMinor: r.ProtoMinor,
		Header:     hdr,
		Body:       http.NoBody,
		Host:       host,
		RemoteAddr: remote,
		RequestURI: u.RequestURI(),
	}
	return o.WithContext(r.Context()), nil
}

// single returns the one value of header name, at most max bytes. A header
// sent several times describes no single request.
func single(h http.Header, name string, max int, required bool) (string, error) {
	v := h[name]
	switch {
	case len(v) == 0 || (len(v) == 1 && v[0] == ""):
		if required {
			return "", badf("%s is missing", name)
		}
		return "", nil
	case len(v) > 1:
		return "", badf("%s is sent %d times; want one value", name, len(v))
	case len(v[0]) > max:
		return "", badf("%s is %d bytes long; the most is %d", name, len(v[0]), max)
	}
	return strings.TrimSpace(v[0]), nil
}

// parseTarget parses a request target in origin form ("/a/b?c=d") or
// absolute form ("https://host/a/b?c=d", reduced to its path and query).
func parseTarget(s string) (*url.URL, error) {
	if s == "" || (s[0] != '/' && !hasHTTPScheme(s)) {
		return nil, badf("%s %s: want a path such as /api/search?q=1", headerURI, quote(s))
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] == 0x7f {
			return nil, badf("%s %s: control characters and spaces must be percent-encoded", headerURI, quote(s))
		}
	}
	u, err := url.ParseRequestURI(s)
	if err != nil {
		return nil, badf("%s %s: not a request target", headerURI, quote(s))
	}
	if u.Path == "" || u.Path[0] != '/' {
		if u.Opaque != "" {
			return nil, badf("%s %s: not a request target", headerURI, quote(s))
		}
		u.Path, u.RawPath = "/"+u.Path, ""
	}
	return &url.URL{Path: u.Path, RawPath: u.RawPath, RawQuery: u.RawQuery}, nil
}

func hasHTTPScheme(s string) bool {
	l := strings.ToLower(s[:min(len(s), 8)])
	return strings.HasPrefix(l, "http://") || strings.HasPrefix(l, "https://")
}

// lastHop splits X-Forwarded-For into its last entry, the address the
// proxy saw (as a RemoteAddr, "ip:0"), and the entries before it.
func lastHop(lines []string) (remote, before string, err error) {
	if len(lines) == 0 {
		return "", "", badf("%s is missing: the proxy must send the client's address", headerFor)
	}
	n := 0
	for _, l := range lines {
		n += len(l)
	}
	if n > MaxForLen {
		return "", "", badf("%s is %d bytes long; the most is %d", headerFor, n, MaxForLen)
	}
	all := strings.Join(lines, ",")
	last := all
	if i := strings.LastIndexByte(all, ','); i >= 0 {
		last, before = all[i+1:], strings.TrimRight(all[:i], " \t,")
	}
	last = strings.TrimSpace(last)
	a, ok := parseAddr(last)
	if !ok {
		return "", "", badf("%s: its last entry %s is not an IP address", headerFor, quote(last))
	}
	return netip.AddrPortFrom(a, 0).String(), strings.TrimSpace(before), nil
}

// parseAddr parses "192.0.2.1", "2001:db8::1", "[2001:db8::1]", or either
// with a port, unmapped and without zone.
func parseAddr(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// validHost accepts a host name or address with an optional port: the
// characters of RFC 3986's reg-name, IP literals and ports, nothing else.
func validHost(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-._~!$&'()*+,;=:[]%", c) >= 0:
		default:
			return false
		}
	}
	return true
}

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return s != ""
}

func badf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadForward}, args...)...)
}

// quote quotes s for an error message, cut to 64 bytes so that a huge
// header does not come back in the answer.
func quote(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "..."
	}
	return strconv.Quote(s)
}
