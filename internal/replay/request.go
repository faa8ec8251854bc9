package replay

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// Format is an access log format.
type Format uint8

// The formats replay reads.
const (
	// Combined is the NCSA combined format of nginx and Apache
	// ($remote_addr - $remote_user [$time_local] "$request" $status
	// $body_bytes_sent "$http_referer" "$http_user_agent"), with nginx's
	// "$http_x_forwarded_for" after it when present, and the common
	// format (no referer or user agent). Fields after these are ignored.
	Combined Format = iota
	// JSON is one JSON object per line, with field names set by
	// JSONFields.
	JSON
	// Envoy is Envoy's default access log format.
	Envoy
	// Istio is the default access log format of Istio's proxies (Envoy's
	// with the downstream address and other fields), since Istio 1.9.
	Istio
	// Caddy is Caddy's JSON access log.
	Caddy
)

var formatNames = [...]string{Combined: "combined", JSON: "json", Envoy: "envoy", Istio: "istio", Caddy: "caddy"}

// String returns the format's name, as ParseFormat takes it.
func (f Format) String() string {
	if int(f) < len(formatNames) {
		return formatNames[f]
	}
	return fmt.Sprintf("format(%d)", f)
}

// FormatNames returns the names of the formats, as ParseFormat takes them,
// in the order of the Format constants, in a slice of the caller's.
func FormatNames() []string { return slices.Clone(formatNames[:]) }

// ParseFormat parses a format's name: "combined", "json", "envoy", "istio" or "caddy".
func ParseFormat(s string) (Format, error) {
	for i, n := range formatNames {
		if s == n {
			return Format(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown log format %q: want %s", ErrUsage, s, orList(formatNames[:]))
}

// ErrUsage reports options replay cannot run with.
var ErrUsage = errors.New("replay: bad usage")

// maxHeaders is the most request headers a log line gives a request.
const maxHeaders = 64

// Request is one log line's request as a parser finds it. Its byte slices
// point into the line, or into the parser's scratch space, and are valid
// until the next line is parsed with the same Request.
type Request struct {
	// Time is when the request was logged, in nanoseconds since the Unix
	// epoch.
	Time int64
	// Client is the address of the connection as logged (with or without
	// a port); empty when the log has none.
	Client []byte
	// Method and Target are the request line's method and target (in
	// origin form, "/path?query", or absolute form).
	Method, Target []byte
	// Host is the Host header, or empty.
	Host []byte
	// Status is the response's status as logged; 0 when the log has none.
	Status int
	// Headers are the other request headers the line carries, with
	// canonical names.
	Headers []Header

	hdrs    [maxHeaders]Header
	scratch []byte // unescaped values
}

// Header is one request header of a log line.
type Header struct {
	Name  string // canonical
	Value []byte
}

func (r *Request) reset() {
	r.Time, r.Client, r.Method, r.Target, r.Host, r.Status = 0, nil, nil, nil, nil, 0
	r.Headers = r.hdrs[:0]
	r.scratch = r.scratch[:0]
}

func (r *Request) addHeader(name string, v []byte) {
	if len(v) == 0 || len(r.Headers) == maxHeaders {
		return
	}
	r.Headers = append(r.Headers, Header{Name: name, Value: v})
}

// parseError is why a line is not a request: the reason, short and fixed,
// so that lines can be counted by it.
type parseError string

func (e parseError) Error() string { return string(e) }

// The reasons a line is not replayed.
const (
	errEmpty       parseError = "empty line"
	errTooLong     parseError = "line too long"
	errSyntax      parseError = "not in the log format"
	errTime        parseError = "bad timestamp"
	errNoRequest   parseError = "no request line (the client sent no valid request)"
	errMethod      parseError = "bad method"
	errTarget      parseError = "bad request target"
	errStatus      parseError = "bad status"
	errJSON        parseError = "not a JSON object"
	errMissingTime parseError = "no time field (name it with --json-fields time=FIELD)"
	errMissingReq  parseError = "no method and path fields (name them with --json-fields method=FIELD,path=FIELD, or request=FIELD)"
)

// parseRequestLine splits a request line ("GET /x HTTP/1.1") into req's
// method and target, checking them as net/http does: a method that is a
// token, a target in origin form ("/..."), absolute form, or "*".
func parseRequestLine(line []byte, req *Request) error {
	if len(line) == 1 && line[0] == '-' || len(line) == 0 {
		return errNoRequest
	}
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 {
		return errNoRequest
	}
	method, rest := line[:sp], line[sp+1:]
	if !isToken(method) {
		return errNoRequest
	}
	target := rest
	if sp2 := lastIndexByte(rest, ' '); sp2 >= 0 {
		target = rest[:sp2]
	}
	if err := checkTarget(target); err != nil {
		return err
	}
	req.Method, req.Target = method, target
	return nil
}

// checkTarget reports whether t can be a request's target, as net/http's
// server reads one before any handler sees the request (it answers 400
// otherwise, and so do nginx and Apache): in origin form ("/path?query")
// with every percent-escape of the path complete, in absolute form with
// the scheme http or https that url.ParseRequestURI accepts, or "*".
func checkTarget(t []byte) error {
	if len(t) == 0 {
		return errTarget
	}
	for _, c := range t {
		if c <= ' ' || c == 0x7f {
			return errTarget
		}
	}
	switch {
	case t[0] == '/':
		if bytes.IndexByte(t, '%') < 0 {
			return nil
		}
		path := t
		if i := bytes.IndexByte(t, '?'); i >= 0 {
			path = t[:i] // the query's escapes are read, if ever, by the application
		}
		if !escapesComplete(path) {
			return errTarget
		}
		return nil
	case len(t) == 1 && t[0] == '*':
		return nil
	case hasPrefixFold(t, "http://") || hasPrefixFold(t, "https://"):
		// Rare enough to be parsed by the server's own parser, host and all.
		if _, err := url.ParseRequestURI(string(t)); err != nil {
			return errTarget
		}
		return nil
	}
	return errTarget
}

// escapesComplete reports whether every '%' of p starts an escape of two
// hexadecimal digits.
func escapesComplete(p []byte) bool {
	for i := 0; i < len(p); i++ {
		if p[i] != '%' {
			continue
		}
		if i+2 >= len(p) {
			return false
		}
		if _, ok := unhex(p[i+1]); !ok {
			return false
		}
		if _, ok := unhex(p[i+2]); !ok {
			return false
		}
		i += 2
	}
	return true
}

func isToken(b []byte) bool {
	if len(b) == 0 || len(b) > 32 {
		return false
	}
	for _, c := range b {
		if !tokenChar[c] {
			return false
		}
	}
	return true
}

var tokenChar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

func hasPrefixFold(b []byte, p string) bool {
	if len(b) < len(p) {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != p[i] {
			return false
		}
	}
	return true
}

func lastIndexByte(b []byte, c byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == c {
			return i
		}
	}
	return -1
}

// atoi parses a decimal number of at most 18 digits.
func atoi(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// parseStatus parses a three-digit status; "-" or "0" (Envoy's for a
// request reset before a response) give 0.
func parseStatus(b []byte) (int, error) {
	if len(b) == 1 && (b[0] == '-' || b[0] == '0') {
		return 0, nil
	}
	n, ok := atoi(b)
	if !ok || len(b) != 3 || n < 100 {
		return 0, errStatus
	}
	return int(n), nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// orList joins names as "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
