package replay

// Caddy's access log (the http.log.access logger, JSON-encoded, as Caddy
// writes it to a file) is one JSON object per request:
//
//	{"level":"info","ts":1646861401.5241024,"logger":"http.log.access.log0","msg":"handled request",
//	 "request":{"remote_ip":"127.0.0.1","remote_port":"41342","proto":"HTTP/1.1","method":"GET",
//	 "host":"example.com","uri":"/api/x?y=1","headers":{"User-Agent":["curl/8.5.0"]}},
//	 "duration":0.0009,"size":10900,"status":200,"resp_headers":{...}}
//
// ts is seconds since the epoch (or, with another time_format, RFC 3339);
// request.remote_ip is the connection's address; request.headers holds
// every request header, each with its values, which are joined with ", "
// as a proxy joins them. Other fields are skipped.

// caddyParser parses Caddy's access log.
type caddyParser struct {
	// names caches the canonical names of the header fields, up to
	// maxHTTPNames of them.
	names headerNames
	tmp   Request // for timeOf
}

func newCaddyParser() *caddyParser { return &caddyParser{names: headerNames{}} }

// timeOf parses the line whole: a JSON object has no place for its time.
func (p *caddyParser) timeOf(line []byte) (int64, error) {
	if err := p.parse(line, &p.tmp); err != nil {
		return 0, err
	}
	return p.tmp.Time, nil
}

func (p *caddyParser) parse(line []byte, req *Request) error {
	req.reset()
	var f jsonFound
	end, err := eachField(line, 0, req, func(key []byte, i int) (int, error) {
		switch string(key) {
		case "ts":
			v, j, ok := jsonValue(line, i, req)
			if !ok {
				return 0, errJSON
			}
			t, ok := parseAnyTime(v)
			if !ok {
				return 0, errTime
			}
			req.Time, f.haveTime = t, true
			return j, nil
		case "status":
			v, j, ok := jsonValue(line, i, req)
			f.status = v
			return j, okOr(ok)
		case "request":
			if i < len(line) && line[i] == '{' {
				return p.request(line, i, req, &f)
			}
		}
		_, j, ok := jsonValue(line, i, req)
		return j, okOr(ok)
	})
	if err != nil {
		return err
	}
	if skipWS(line, end) != len(line) {
		return errJSON
	}
	return f.finish(req)
}

// request reads the "request" object at line[i].
func (p *caddyParser) request(line []byte, i int, req *Request, f *jsonFound) (int, error) {
	return eachField(line, i, req, func(key []byte, i int) (int, error) {
		if string(key) == "headers" && i < len(line) && line[i] == '{' {
			return eachField(line, i, req, func(name []byte, i int) (int, error) {
				v, j, ok := joined(line, i, req)
				if h := p.headerName(name); ok && h != "" && len(v) > 0 {
					req.addHeader(h, v)
				}
				return j, okOr(ok)
			})
		}
		v, j, ok := jsonValue(line, i, req)
		if !ok {
			return 0, errJSON
		}
		if len(v) == 0 {
			v = nil
		}
		switch string(key) {
		case "remote_ip":
			req.Client = v
		case "method":
			f.method = v
		case "uri":
			f.path = v
		case "host":
			req.Host = v
		}
		return j, nil
	})
}

// joined reads the JSON array of strings at line[i] and returns its
// strings joined with ", ", and the index after it.
func joined(line []byte, i int, req *Request) ([]byte, int, bool) {
	if i >= len(line) || line[i] != '[' {
		return nil, 0, false
	}
	i = skipWS(line, i+1)
	if i < len(line) && line[i] == ']' {
		return nil, i + 1, true
	}
	var out []byte
	for n := 0; ; n++ {
		if i >= len(line) || line[i] != '"' {
			return nil, 0, false
		}
		v, j, ok := jsonString(line, i, req)
		if !ok {
			return nil, 0, false
		}
		if n == 0 {
			out = v
		} else {
			// The values so far and this one are copied to the end of
			// the scratch space (headers rarely have more than one).
			from := len(req.scratch)
			req.scratch = append(append(append(req.scratch, out...), ", "...), v...)
			out = req.scratch[from:]
		}
		i = skipWS(line, j)
		if i < len(line) && line[i] == ',' {
			i = skipWS(line, i+1)
			continue
		}
		if i < len(line) && line[i] == ']' {
			return out, i + 1, true
		}
		return nil, 0, false
	}
}

// headerName returns the canonical name of a header field's key, or "" for
// one that is no header name.
func (p *caddyParser) headerName(key []byte) string {
	if h, ok := p.names[string(key)]; ok {
		return h
	}
	return p.names.add(key, key)
}

// okOr returns nil when ok, else errJSON.
func okOr(ok bool) error {
	if ok {
		return nil
	}
	return errJSON
}
