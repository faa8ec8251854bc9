package replay

import "bytes"

// The combined format of nginx and Apache:
//
//	203.0.113.7 - - [10/Oct/2023:13:55:36 +0000] "GET /a?b=1 HTTP/1.1" 200 512 "https://ex.com/" "curl/8.5.0"
//
// nginx's default "main" format adds "$http_x_forwarded_for" after the
// user agent; the common format stops after the size. Quoted fields may
// hold nginx's \xHH escapes and Apache's \" and \\; they are unescaped.
// Fields after these are ignored. Times have a resolution of one second.

// combinedParser parses the combined format. The last timestamp each of
// timeOf and parse met is kept, so that the many lines of one second are
// converted once: kept apart, since timeOf reads the log ahead of the lines
// parse is given, by up to the replay's tolerance.
type combinedParser struct {
	ahead, cur lastTime
}

// lastTime is a timestamp as logged and its time.
type lastTime struct {
	text  [26]byte
	nanos int64
}

// parse parses line into req without allocating (but for lines with
// escapes longer than any before).
func (p *combinedParser) parse(line []byte, req *Request) error {
	req.reset()
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 {
		return errSyntax
	}
	req.Client = line[:sp]
	t, i, err := p.time(&p.cur, line, sp)
	if err != nil {
		return err
	}
	req.Time = t
	if i+1 >= len(line) || line[i] != ' ' || line[i+1] != '"' {
		return errSyntax
	}
	reqLine, i, ok := quoted(line, i+1, req)
	if !ok {
		return errSyntax
	}
	// Status and size.
	if i >= len(line) || line[i] != ' ' {
		return errSyntax
	}
	i++
	end := i
	for end < len(line) && line[end] != ' ' {
		end++
	}
	status, err := parseStatus(line[i:end])
	if err != nil {
		return err
	}
	req.Status = status
	i = end + 1
	for i < len(line) && line[i] != ' ' {
		i++
	}
	// The request line is checked after the fields around it, so that a
	// line of another format is reported as such, not as a bad request.
	if err := parseRequestLine(reqLine, req); err != nil {
		return err
	}
	// Optional quoted fields: referer, user agent, X-Forwarded-For.
	for _, name := range [...]string{"Referer", "User-Agent", "X-Forwarded-For"} {
		if i+1 >= len(line) || line[i] != ' ' || line[i+1] != '"' {
			break
		}
		var v []byte
		if v, i, ok = quoted(line, i+1, req); !ok {
			return errSyntax
		}
		if len(v) == 1 && v[0] == '-' {
			continue
		}
		req.addHeader(name, v)
	}
	return nil
}

// timeOf returns the line's time.
func (p *combinedParser) timeOf(line []byte) (int64, error) {
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 {
		return 0, errSyntax
	}
	t, _, err := p.time(&p.ahead, line, sp)
	return t, err
}

// time finds and parses the time in brackets after the client's address,
// which ends at sp, and returns it and the index just past the bracket.
// last is the timestamp it met last, which it updates.
func (p *combinedParser) time(last *lastTime, line []byte, sp int) (int64, int, error) {
	// The ident and user fields, then the time in brackets. A user may
	// hold spaces (Apache does not escape them): look for " [".
	i := sp
	for {
		j := bytes.IndexByte(line[i+1:], '[')
		if j < 0 {
			return 0, 0, errSyntax
		}
		if i += j + 1; line[i-1] == ' ' {
			break
		}
	}
	i++
	if i+27 > len(line) || line[i+26] != ']' {
		return 0, 0, errSyntax
	}
	ts := line[i : i+26]
	if string(ts) == string(last.text[:]) && last.nanos != 0 {
		return last.nanos, i + 27, nil
	}
	t, ok := parseLocalTime(ts)
	if !ok {
		return 0, 0, errTime
	}
	copy(last.text[:], ts)
	last.nanos = t
	return t, i + 27, nil
}

// quoted returns the quoted field that starts at line[i] ('"'),
// unescaped, and the index just past its closing quote.
func quoted(line []byte, i int, req *Request) (v []byte, next int, ok bool) {
	start := i + 1
	rest := line[start:]
	j := bytes.IndexByte(rest, '"')
	switch {
	case j < 0:
		return nil, 0, false // not closed, escaped or not
	case bytes.IndexByte(rest[:j], '\\') >= 0:
		return unescape(line, start, req)
	}
	return rest[:j], start + j + 1, true
}

// unescape is quoted for a field with escapes: it writes the value to
// req's scratch space.
func unescape(line []byte, start int, req *Request) (v []byte, next int, ok bool) {
	from := len(req.scratch)
	for j := start; j < len(line); j++ {
		c := line[j]
		switch {
		case c == '"':
			return req.scratch[from:], j + 1, true
		case c != '\\':
			req.scratch = append(req.scratch, c)
			continue
		}
		if j+1 >= len(line) {
			return nil, 0, false
		}
		j++
		switch e := line[j]; e {
		case 'x':
			if j+2 >= len(line) {
				return nil, 0, false
			}
			h, ok1 := unhex(line[j+1])
			l, ok2 := unhex(line[j+2])
			if !ok1 || !ok2 {
				return nil, 0, false
			}
			req.scratch = append(req.scratch, h<<4|l)
			j += 2
		case 'n':
			req.scratch = append(req.scratch, '\n')
		case 't':
			req.scratch = append(req.scratch, '\t')
		case 'r':
			req.scratch = append(req.scratch, '\r')
		default: // \" and \\, and anything else as it is
			req.scratch = append(req.scratch, e)
		}
	}
	return nil, 0, false
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
