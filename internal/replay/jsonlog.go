package replay

import (
	"fmt"
	"net/textproto"
	"strings"
	"unicode/utf8"
)

// JSONFields names the fields of a JSON log line that replay reads. Every
// name has a default, nginx's variable's name, so that a log_format of
// "$time_iso8601" as "time", "$remote_addr" as "remote_addr" and so on is
// read as it is. A field that is absent, null, "" or "-" is taken as
// missing.
type JSONFields struct {
	// Time is the request's time: RFC 3339 (with a fraction), $time_local,
	// or seconds since the Unix epoch as a number or a string ($msec).
	// Default: the first of "time", "time_iso8601", "time_local" and
	// "msec" (nginx's names for its time variables) that a line has.
	Time string
	// Client is the connection's address. Default "remote_addr".
	Client string
	// Method and Path are the request's method and target (path and
	// query). Defaults "request_method" and "request_uri".
	Method, Path string
	// Request is the whole request line ("GET /x HTTP/1.1"), read when
	// Method or Path is missing. Default "request".
	Request string
	// Host is the Host header. Default "host".
	Host string
	// Status is the response's status, a number or a string. Default
	// "status".
	Status string
	// Headers maps request header names to the fields that hold them.
	// Besides these, every field named "http_NAME" is the header NAME
	// with underscores as dashes ("http_x_api_key" is X-Api-Key), as
	// nginx names its header variables.
	Headers map[string]string
}

func (f JSONFields) withDefaults() JSONFields {
	def := func(s *string, d string) {
		if *s == "" {
			*s = d
		}
	}
	def(&f.Client, "remote_addr")
	def(&f.Method, "request_method")
	def(&f.Path, "request_uri")
	def(&f.Request, "request")
	def(&f.Host, "host")
	def(&f.Status, "status")
	return f
}

// ParseJSONFields parses the --json-fields flag's form: comma-separated
// ROLE=FIELD pairs, where ROLE is time, client, method, path, request, host,
// status or header:NAME ("time=ts,client=ip,header:X-Api-Key=api_key").
func ParseJSONFields(s string) (JSONFields, error) {
	var f JSONFields
	if strings.TrimSpace(s) == "" {
		return f, nil
	}
	for _, pair := range strings.Split(s, ",") {
		role, field, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || field == "" {
			return f, fmt.Errorf("%w: json field %q: want ROLE=FIELD", ErrUsage, pair)
		}
		switch {
		case role == "time":
			f.Time = field
		case role == "client":
			f.Client = field
		case role == "method":
			f.Method = field
		case role == "path":
			f.Path = field
		case role == "request":
			f.Request = field
		case role == "host":
			f.Host = field
		case role == "status":
			f.Status = field
		case strings.HasPrefix(role, "header:") && isToken([]byte(role[len("header:"):])):
			if f.Headers == nil {
				f.Headers = map[string]string{}
			}
			f.Headers[textproto.CanonicalMIMEHeaderKey(role[len("header:"):])] = field
		default:
			return f, fmt.Errorf("%w: json field role %q: want time, client, method, path, request, host, status or header:NAME", ErrUsage, role)
		}
	}
	return f, nil
}

// jsonParser reads one flat JSON object per line. Nested objects and
// arrays are skipped.
type jsonParser struct {
	f JSONFields
	// byField maps each configured header field to its header name.
	byField map[string]string
	// httpNames caches the header names of "http_" fields, up to
	// maxHTTPNames of them.
	httpNames headerNames
	tmp       Request // for timeOf
}

// timeOf parses the line whole: a JSON object has no place for its time.
func (p *jsonParser) timeOf(line []byte) (int64, error) {
	if err := p.parse(line, &p.tmp); err != nil {
		return 0, err
	}
	return p.tmp.Time, nil
}

const maxHTTPNames = 1024

// isTime reports whether the field k is the line's time.
func (p *jsonParser) isTime(k string) bool {
	if p.f.Time != "" {
		return k == p.f.Time
	}
	return k == "time" || k == "time_iso8601" || k == "time_local" || k == "msec"
}

func newJSONParser(f JSONFields) *jsonParser {
	p := &jsonParser{f: f.withDefaults(), byField: map[string]string{}, httpNames: headerNames{}}
	for h, field := range f.Headers {
		p.byField[field] = h
	}
	return p
}

func (p *jsonParser) parse(line []byte, req *Request) error {
	req.reset()
	var f jsonFound
	end, err := eachField(line, 0, req, func(key []byte, i int) (int, error) {
		v, j, ok := jsonValue(line, i, req)
		if !ok {
			return 0, errJSON
		}
		if len(v) == 0 || len(v) == 1 && v[0] == '-' {
			v = nil
		}
		switch k := string(key); {
		case v == nil:
		case !f.haveTime && p.isTime(k):
			t, ok := parseAnyTime(v)
			if !ok {
				return 0, errTime
			}
			req.Time, f.haveTime = t, true
		case k == p.f.Client:
			req.Client = v
		case k == p.f.Method:
			f.method = v
		case k == p.f.Path:
			f.path = v
		case k == p.f.Request:
			f.reqLine = v
		case k == p.f.Host:
			req.Host = v
		case k == p.f.Status:
			f.status = v
		default:
			if h, ok := p.byField[k]; ok {
				req.addHeader(h, v)
			} else if h := p.httpName(key); h != "" {
				req.addHeader(h, v)
			}
		}
		return j, nil
	})
	if err != nil {
		return err
	}
	if skipWS(line, end) != len(line) {
		return errJSON
	}
	return f.finish(req)
}

// jsonFound is what a JSON line gave besides what is set in its Request
// as it is read.
type jsonFound struct {
	haveTime                      bool
	method, path, reqLine, status []byte
}

// finish checks what a JSON line gave and completes req with it.
func (f *jsonFound) finish(req *Request) error {
	if !f.haveTime {
		return errMissingTime
	}
	if f.status != nil {
		s, err := parseStatus(f.status)
		if err != nil {
			return err
		}
		req.Status = s
	}
	switch {
	case f.method != nil && f.path != nil:
		if !isToken(f.method) {
			return errMethod
		}
		if err := checkTarget(f.path); err != nil {
			return err
		}
		req.Method, req.Target = f.method, f.path
		return nil
	case f.reqLine != nil:
		return parseRequestLine(f.reqLine, req)
	}
	return errMissingReq
}

// eachField reads the JSON object at b[i] (after spaces), calling f with
// each field's key and the index of its value; f returns the index after
// the value, or an error that ends the reading. eachField returns the
// index after the object, or f's error, or errJSON for an object that is
// not well formed.
func eachField(b []byte, i int, req *Request, f func(key []byte, i int) (int, error)) (int, error) {
	i = skipWS(b, i)
	if i >= len(b) || b[i] != '{' {
		return 0, errJSON
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return 0, errJSON
		}
		key, j, ok := jsonString(b, i, req)
		if !ok {
			return 0, errJSON
		}
		i = skipWS(b, j)
		if i >= len(b) || b[i] != ':' {
			return 0, errJSON
		}
		var err error
		if i, err = f(key, skipWS(b, i+1)); err != nil {
			return 0, err
		}
		i = skipWS(b, i)
		if i < len(b) && b[i] == ',' {
			i = skipWS(b, i+1)
			continue
		}
		if i < len(b) && b[i] == '}' {
			return i + 1, nil
		}
		return 0, errJSON
	}
}

// httpName returns the header name of an "http_NAME" field, or "".
func (p *jsonParser) httpName(key []byte) string {
	if len(key) <= 5 || string(key[:5]) != "http_" {
		return ""
	}
	if h, ok := p.httpNames[string(key)]; ok {
		return h
	}
	name := []byte(string(key[5:]))
	for i, c := range name {
		if c == '_' {
			name[i] = '-'
		}
	}
	return p.httpNames.add(key, name)
}

// headerNames maps the keys of a log's fields to the canonical header
// names they hold ("" for none), for up to maxHTTPNames keys.
type headerNames map[string]string

// add returns the canonical form of the header name name, or "" if name
// is none, and remembers it for key if there is room.
func (c headerNames) add(key, name []byte) string {
	h := ""
	if isToken(name) {
		h = textproto.CanonicalMIMEHeaderKey(string(name))
	}
	if len(c) < maxHTTPNames {
		c[string(key)] = h
	}
	return h
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// jsonValue returns the value at b[i]: a string's contents, unescaped; a
// number's, true's or false's text; nil for null and for objects and
// arrays, which are skipped. It returns the index past the value.
func jsonValue(b []byte, i int, req *Request) ([]byte, int, bool) {
	if i >= len(b) {
		return nil, 0, false
	}
	switch c := b[i]; {
	case c == '"':
		return jsonString(b, i, req)
	case c == '{' || c == '[':
		j, ok := skipNested(b, i)
		return nil, j, ok
	case c == 'n':
		if len(b)-i >= 4 && string(b[i:i+4]) == "null" {
			return nil, i + 4, true
		}
		return nil, 0, false
	default:
		j := i
		for j < len(b) && (b[j] >= '0' && b[j] <= '9' || b[j] == '-' || b[j] == '+' || b[j] == '.' || b[j] == 'e' || b[j] == 'E' || b[j] >= 'a' && b[j] <= 'z') {
			j++
		}
		if j == i {
			return nil, 0, false
		}
		return b[i:j], j, true
	}
}

// skipNested skips the object or array at b[i], returning the index past
// it. Nesting is bounded, so that a line of brackets cannot exhaust
// anything.
func skipNested(b []byte, i int) (int, bool) {
	depth := 0
	for i < len(b) {
		switch b[i] {
		case '{', '[':
			if depth++; depth > 64 {
				return 0, false
			}
		case '}', ']':
			if depth--; depth == 0 {
				return i + 1, true
			}
		case '"':
			j := i + 1
			for j < len(b) && b[j] != '"' {
				if b[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(b) {
				return 0, false
			}
			i = j
		}
		i++
	}
	return 0, false
}

// jsonString returns the string at b[i] ('"'), unescaped, and the index
// past its closing quote. Strings without escapes are not copied.
func jsonString(b []byte, i int, req *Request) ([]byte, int, bool) {
	start := i + 1
	for j := start; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[start:j], j + 1, true
		case c == '\\':
			return jsonUnescape(b, start, req)
		case c < 0x20:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

func jsonUnescape(b []byte, start int, req *Request) ([]byte, int, bool) {
	from := len(req.scratch)
	for j := start; j < len(b); j++ {
		c := b[j]
		switch {
		case c == '"':
			return req.scratch[from:], j + 1, true
		case c < 0x20:
			return nil, 0, false
		case c != '\\':
			req.scratch = append(req.scratch, c)
			continue
		}
		if j+1 >= len(b) {
			return nil, 0, false
		}
		j++
		switch e := b[j]; e {
		case '"', '\\', '/':
			req.scratch = append(req.scratch, e)
		case 'b':
			req.scratch = append(req.scratch, '\b')
		case 'f':
			req.scratch = append(req.scratch, '\f')
		case 'n':
			req.scratch = append(req.scratch, '\n')
		case 'r':
			req.scratch = append(req.scratch, '\r')
		case 't':
			req.scratch = append(req.scratch, '\t')
		case 'u':
			r, n, ok := hex4(b, j+1)
			if !ok {
				return nil, 0, false
			}
			j += n
			req.scratch = utf8.AppendRune(req.scratch, r)
		default:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// hex4 reads the 4 hex digits of a \u escape at b[i] and, for a high
// surrogate followed by "\uDC00"-style low one, that too. It returns the
// rune (U+FFFD for a lone surrogate) and the bytes read.
func hex4(b []byte, i int) (rune, int, bool) {
	read := func(i int) (rune, bool) {
		if i+4 > len(b) {
			return 0, false
		}
		var r rune
		for _, c := range b[i : i+4] {
			v, ok := unhex(c)
			if !ok {
				return 0, false
			}
			r = r<<4 | rune(v)
		}
		return r, true
	}
	r, ok := read(i)
	if !ok {
		return 0, 0, false
	}
	if r < 0xd800 || r > 0xdfff {
		return r, 4, true
	}
	if r <= 0xdbff && i+10 <= len(b) && b[i+4] == '\\' && b[i+5] == 'u' {
		if lo, ok := read(i + 6); ok && lo >= 0xdc00 && lo <= 0xdfff {
			return 0x10000 + (r-0xd800)<<10 + (lo - 0xdc00), 10, true
		}
	}
	return utf8.RuneError, 4, true
}
