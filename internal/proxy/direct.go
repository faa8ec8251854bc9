// The direct path: the proxy's own HTTP/1.1 exchange with a plain-HTTP
// upstream, for requests without a body that may be sent again.

package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strings"
	"sync"
	"time"
)

// The direct path serves the common request of an API gateway (GET, HEAD,
// OPTIONS or TRACE, no body, no upgrade) to a plain-HTTP upstream on the
// request's own goroutine: it writes the request into a pooled keep-alive
// connection and reads the response from it, where http.Transport hands
// each request to a writing and a reading goroutine of the connection and
// back, and httputil.ReverseProxy clones the request and removes the
// hop-by-hop fields one canonicalised name at a time. Every other request
// (a body, an upgrade, an https upstream, an upstream URL with a path) goes
// the general way, through ReverseProxy and http.Transport.
//
// What the upstream receives is what the general path sends, field for
// field, but for the order of the fields and for Accept-Encoding, which
// http.Transport adds (and undoes) when the client sent none. The answer is
// the general path's too: the upstream's fields less the hop-by-hop ones,
// 1xx responses passed on, trailers, streams flushed as they come, and the
// same failures (504, 502, the client gone) through Proxy.fail.

// directConn is an upstream connection of the direct path.
type directConn struct {
	c      net.Conn
	br     *bufio.Reader
	bw     *bufio.Writer
	idle   time.Time // when it was put back in the pool
	reused bool      // it served a request before this one
	// scratch holds the forwarding fields' values while they are written.
	scratch []byte
}

// directPool holds the direct path's idle upstream connections, the most
// recently used first out. It is safe for concurrent use.
type directPool struct {
	addr   string // host:port
	dialer net.Dialer
	max    int           // idle connections kept at most
	ttl    time.Duration // how long an idle connection is kept

	mu    sync.Mutex
	idle  []*directConn
	sweep *time.Timer // closes connections idle past ttl; nil when none is armed
	// closed: closeIdle was called (a reload replaced the proxy), and the
	// connections of the requests still in flight close when they end.
	closed bool
}

// get returns an idle connection, or a new one when there is none or
// fresh is set.
func (p *directPool) get(ctx context.Context, fresh bool) (*directConn, error) {
	if !fresh {
		p.mu.Lock()
		for n := len(p.idle); n > 0; n = len(p.idle) {
			dc := p.idle[n-1]
			p.idle[n-1] = nil
			p.idle = p.idle[:n-1]
			if time.Since(dc.idle) < p.ttl {
				p.mu.Unlock()
				dc.reused = true
				return dc, nil
			}
			dc.c.Close()
		}
		p.mu.Unlock()
	}
	c, err := p.dialer.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	return &directConn{c: c, br: bufio.NewReaderSize(c, 4<<10), bw: bufio.NewWriterSize(c, 4<<10)}, nil
}

// put returns a connection whose exchange ended cleanly to the pool.
func (p *directPool) put(dc *directConn) {
	dc.idle = time.Now()
	p.mu.Lock()
	if p.closed || len(p.idle) >= p.max {
		p.mu.Unlock()
		dc.c.Close()
		return
	}
	p.idle = append(p.idle, dc)
	if p.sweep == nil {
		p.sweep = time.AfterFunc(p.ttl, p.expire)
	}
	p.mu.Unlock()
}

// expire closes the connections idle for ttl, and looks again later while
// some remain.
func (p *directPool) expire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	keep := p.idle[:0]
	for _, dc := range p.idle {
		if time.Since(dc.idle) >= p.ttl {
			dc.c.Close()
			continue
		}
		keep = append(keep, dc)
	}
	clear(p.idle[len(keep):])
	p.idle = keep
	p.sweep = nil
	if len(p.idle) > 0 {
		p.sweep = time.AfterFunc(p.ttl/2, p.expire)
	}
}

// closeIdle closes every idle connection, and each connection in use
// once its request ends.
func (p *directPool) closeIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, dc := range p.idle {
		dc.c.Close()
	}
	clear(p.idle)
	p.idle = p.idle[:0]
}

// direct reports whether r goes the direct path: a method that may be
// sent again, no body, no upgrade, a path, and a Host in ASCII (the
// general path would send an IDNA form of any other).
func direct(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
	default:
		return false
	}
	if (r.Body != nil && r.Body != http.NoBody) || r.URL.Opaque != "" || r.URL.Path == "" || r.URL.Path[0] != '/' {
		return false
	}
	if _, ok := r.Header["Upgrade"]; ok {
		return false
	}
	for i := 0; i < len(r.Host); i++ {
		if r.Host[i] >= 0x80 {
			return false
		}
	}
	return true
}

// aLongTimeAgo is a deadline in the past, to wake a blocked read or write.
var aLongTimeAgo = time.Unix(1, 0)

// serveDirect proxies r on the direct path.
func (p *Proxy) serveDirect(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	var (
		dc   *directConn
		resp *http.Response
		stop func() bool
		err  error
	)
	for attempt := 0; ; attempt++ {
		if dc, err = p.pool.get(ctx, attempt > 0); err != nil {
			p.fail(w, r, err)
			return
		}
		// The response header timeout is set first: the client's going
		// away, which ends the exchange as it would the transport's, must
		// not be overwritten by it.
		c := dc.c
		_ = c.SetReadDeadline(time.Now().Add(p.headerTimeout))
		stop = context.AfterFunc(ctx, func() { _ = c.SetDeadline(aLongTimeAgo) })
		resp, err = p.exchange(ctx, dc, w, r)
		if err == nil {
			break
		}
		stop()
		dc.c.Close()
		// A kept-alive connection the upstream closed before answering
		// is tried again on a new one, as http.Transport does: every
		// request of this path may be sent again.
		var unanswered *unansweredError
		if attempt > 0 || !dc.reused || ctx.Err() != nil || !errors.As(err, &unanswered) {
			p.fail(w, r, err)
			return
		}
	}

	h := w.Header()
	copyResponseHeader(h, resp.Header)
	if n := len(resp.Trailer); n > 0 {
		keys := make([]string, 0, n)
		for k := range resp.Trailer {
			keys = append(keys, k)
		}
		h["Trailer"] = []string{strings.Join(keys, ", ")}
	}
	w.WriteHeader(resp.StatusCode)
	if err := p.copyBody(w, resp); err != nil {
		stop()
		dc.c.Close()
		panic(http.ErrAbortHandler) // as ReverseProxy does: the client sees the response cut off
	}
	if len(resp.Trailer) > 0 {
		_ = http.NewResponseController(w).Flush()
		for k, vv := range resp.Trailer {
			h[http.TrailerPrefix+k] = vv
		}
	}
	if !stop() || resp.Close {
		dc.c.Close() // the client's going away may have cut the connection off
		return
	}
	p.pool.put(dc)
}

// unansweredError is a failure to send a request, or a connection that
// ended before the first byte of an answer: what a kept-alive connection
// that the upstream had closed gives.
type unansweredError struct{ err error }

func (e *unansweredError) Error() string { return e.err.Error() }
func (e *unansweredError) Unwrap() error { return e.err }

// exchange writes r to dc and reads the response's header, within the
// read deadline set on dc, passing 1xx responses on to w. The response's
// body reads from dc.
func (p *Proxy) exchange(ctx context.Context, dc *directConn, w http.ResponseWriter, r *http.Request) (*http.Response, error) {
	p.writeRequest(dc, r)
	if err := dc.bw.Flush(); err != nil {
		return nil, &unansweredError{err}
	}
	if _, err := dc.br.Peek(1); err != nil && !isTimeout(err) {
		return nil, &unansweredError{err}
	}
	for n1xx := 0; ; n1xx++ {
		resp, err := http.ReadResponse(dc.br, r)
		if err != nil {
			return nil, err
		}
		code := resp.StatusCode
		if code == http.StatusSwitchingProtocols {
			return nil, errors.New("proxy: the upstream switched protocols without being asked to")
		}
		if code >= 200 || code < 100 {
			_ = dc.c.SetReadDeadline(time.Time{})
			if err := ctx.Err(); err != nil {
				return nil, err // the deadline just cleared may have been the client's departure
			}
			return resp, nil
		}
		if n1xx >= 5 {
			return nil, errors.New("proxy: too many 1xx informational responses")
		}
		// A 1xx response is passed on, with its fields and none of the
		// final response's.
		h := w.Header()
		var added []string
		for k, vv := range resp.Header {
			if _, ok := h[k]; !ok {
				h[k] = vv
				added = append(added, k)
			}
		}
		w.WriteHeader(code)
		for _, k := range added {
			delete(h, k)
		}
	}
}

// copyBody copies the response's body to w through a pooled buffer,
// flushing after each write for a stream (no length, or server-sent
// events). A failure to read the upstream is logged.
func (p *Proxy) copyBody(w http.ResponseWriter, resp *http.Response) error {
	if resp.Body == http.NoBody {
		return nil
	}
	defer resp.Body.Close()
	var rc *http.ResponseController
	if resp.ContentLength < 0 || isEventStream(resp.Header["Content-Type"]) {
		// A stream's header goes at once, before its first event.
		rc = http.NewResponseController(w)
		if err := rc.Flush(); err != nil {
			return err
		}
	}
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	buf := *bp
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return err
			}
			if rc != nil {
				if err := rc.Flush(); err != nil {
					return err
				}
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			_, _ = limitedWriter{p}.Write([]byte("httputil: ReverseProxy read error during body copy: " + rerr.Error()))
			return rerr
		}
	}
}

// isEventStream reports whether a Content-Type is text/event-stream,
// whatever its parameters and case.
func isEventStream(ct []string) bool {
	if len(ct) == 0 {
		return false
	}
	const es = "text/event-stream"
	v := strings.TrimLeft(ct[0], " \t")
	if len(v) < len(es) || !strings.EqualFold(v[:len(es)], es) {
		return false
	}
	rest := strings.TrimLeft(v[len(es):], " \t")
	return rest == "" || rest[0] == ';'
}

// hopByHop are the fields that concern one connection, never passed on.
var hopByHop = map[string]bool{
	"Connection":          true,
	"Proxy-Connection":    true,
	"Keep-Alive":          true,
	"Proxy-Authenticate":  true,
	"Proxy-Authorization": true,
	"Te":                  true,
	"Trailer":             true,
	"Transfer-Encoding":   true,
	"Upgrade":             true,
}

// connectionTokens returns the field names the Connection field lists,
// canonical, or nil.
func connectionTokens(h http.Header) []string {
	var out []string
	for _, v := range h["Connection"] {
		for tok := range strings.SplitSeq(v, ",") {
			if tok = textproto.TrimString(tok); tok != "" {
				out = append(out, textproto.CanonicalMIMEHeaderKey(tok))
			}
		}
	}
	return out
}

// copyResponseHeader adds the upstream's fields to the client's, less the
// hop-by-hop ones. The upstream's values are handed over, not copied.
func copyResponseHeader(dst, src http.Header) {
	conn := connectionTokens(src)
	for k, vv := range src {
		if hopByHop[k] || (conn != nil && contains(conn, k)) {
			continue
		}
		if old, ok := dst[k]; ok {
			dst[k] = append(old, vv...)
		} else {
			dst[k] = vv
		}
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// writeRequest writes the request the upstream receives for r: its method
// and target, the Host p.host selects, r's fields less the hop-by-hop and
// forwarding ones, and the forwarding fields (see New).
func (p *Proxy) writeRequest(dc *directConn, r *http.Request) {
	bw := dc.bw
	bw.WriteString(r.Method)
	bw.WriteByte(' ')
	if path := r.URL.EscapedPath(); path != "" {
		bw.WriteString(path)
	} else {
		bw.WriteByte('/')
	}
	if r.URL.ForceQuery || r.URL.RawQuery != "" {
		bw.WriteByte('?')
		bw.WriteString(r.URL.RawQuery)
	}
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	host := r.Host
	if p.host == HostUpstream || host == "" {
		host = p.target.Host
	}
	writeValue(bw, host)
	bw.WriteString("\r\n")
	h := hopOf(r, p.ip)
	conn := connectionTokens(r.Header)
	for k, vv := range r.Header {
		switch k {
		case "Host", "Content-Length", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded":
			continue
		case "X-Real-Ip":
			if !h.trusted {
				continue // a client's claim; only proxies' are passed on
			}
		}
		if hopByHop[k] || (conn != nil && contains(conn, k)) {
			continue
		}
		for _, v := range vv {
			writeField(bw, k, v)
		}
	}
	for _, v := range r.Header["Te"] {
		if tokenIn(v, "trailers") {
			bw.WriteString("Te: trailers\r\n")
			break
		}
	}
	if h.hasPeer {
		bw.WriteString("X-Forwarded-For: ")
		dc.scratch = h.appendXFF(dc.scratch[:0], r)
		writeValueBytes(bw, dc.scratch)
		bw.WriteString("\r\n")
	}
	if v := h.xfh(r); v != nil {
		for _, s := range v {
			writeField(bw, "X-Forwarded-Host", s)
		}
	} else {
		writeField(bw, "X-Forwarded-Host", r.Host)
	}
	for _, s := range h.xfp(r) {
		writeField(bw, "X-Forwarded-Proto", s)
	}
	bw.WriteString("Forwarded: ")
	dc.scratch = h.appendForwarded(dc.scratch[:0], r)
	writeValueBytes(bw, dc.scratch)
	bw.WriteString("\r\n\r\n")
}

// writeField writes one field line.
func writeField(bw *bufio.Writer, k, v string) {
	bw.WriteString(k)
	bw.WriteString(": ")
	writeValue(bw, v)
	bw.WriteString("\r\n")
}

// writeValue writes a field value as http.Header.Write does: line breaks
// become spaces, and surrounding blanks are dropped.
func writeValue(bw *bufio.Writer, v string) {
	v = textproto.TrimString(v)
	if strings.IndexByte(v, '\r') < 0 && strings.IndexByte(v, '\n') < 0 {
		bw.WriteString(v)
		return
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == '\r' || c == '\n' {
			bw.WriteByte(' ')
		} else {
			bw.WriteByte(c)
		}
	}
}

// writeValueBytes is writeValue for a value in a buffer of the caller's,
// which it may change.
func writeValueBytes(bw *bufio.Writer, v []byte) {
	for i, c := range v {
		if c == '\r' || c == '\n' {
			v[i] = ' '
		}
	}
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	bw.Write(v)
}

// tokenIn reports whether the comma-separated list v holds token, in any
// case.
func tokenIn(v, token string) bool {
	for tok := range strings.SplitSeq(v, ",") {
		if strings.EqualFold(textproto.TrimString(tok), token) {
			return true
		}
	}
	return false
}
