package replay

import "bytes"

// Envoy's default access log format:
//
//	[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%"
//	%RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %DURATION%
//	%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%" "%REQ(USER-AGENT)%"
//	"%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%"
//
// on one line. It logs no downstream address: the connection's address is
// taken to be the last address of X-Forwarded-For, the one Envoy appends
// when it uses the remote address (use_remote_address), and the addresses
// before it are the X-Forwarded-For the request came with, for
// configurations that trust proxies. Times are those
// the requests started, in milliseconds.

// envoyParser parses Envoy's default format.
type envoyParser struct{}

func (envoyParser) timeOf(line []byte) (int64, error) {
	t, _, err := envoyTime(line)
	return t, err
}

// envoyTime parses the time in brackets that starts a line, and returns it
// and the index of the closing bracket.
func envoyTime(line []byte) (int64, int, error) {
	if len(line) < 2 || line[0] != '[' {
		return 0, 0, errSyntax
	}
	end := bytes.IndexByte(line, ']')
	if end < 0 {
		return 0, 0, errSyntax
	}
	t, ok := parseRFC3339(line[1:end])
	if !ok {
		return 0, 0, errTime
	}
	return t, end, nil
}

func (envoyParser) parse(line []byte, req *Request) error {
	req.reset()
	t, end, err := envoyTime(line)
	if err != nil {
		return err
	}
	req.Time = t
	i := end + 1
	var ok bool
	if i+1 >= len(line) || line[i] != ' ' || line[i+1] != '"' {
		return errSyntax
	}
	reqLine, i, ok := quoted(line, i+1, req)
	if !ok {
		return errSyntax
	}
	// Six unquoted fields: code, flags, bytes received and sent, duration
	// and the upstream's service time.
	var fields [6][]byte
	for k := range fields {
		if i >= len(line) || line[i] != ' ' {
			return errSyntax
		}
		i++
		start := i
		for i < len(line) && line[i] != ' ' {
			i++
		}
		fields[k] = line[start:i]
	}
	status, err := parseStatus(fields[0])
	if err != nil {
		return err
	}
	req.Status = status
	var quotedFields [5][]byte
	for k := range quotedFields {
		if i+1 >= len(line) || line[i] != ' ' || line[i+1] != '"' {
			return errSyntax
		}
		if quotedFields[k], i, ok = quoted(line, i+1, req); !ok {
			return errSyntax
		}
		if len(quotedFields[k]) == 1 && quotedFields[k][0] == '-' {
			quotedFields[k] = nil
		}
	}
	if err := parseRequestLine(reqLine, req); err != nil {
		return err
	}
	// The last address of X-Forwarded-For is the connection's, which
	// Envoy appended; the rest is the header as the request came.
	xff := quotedFields[0]
	if len(xff) > 0 {
		last, sent := xff, []byte(nil)
		if c := lastIndexByte(xff, ','); c >= 0 {
			last, sent = xff[c+1:], xff[:c]
		}
		req.Client = trimSpace(last)
		req.addHeader("X-Forwarded-For", trimSpace(sent))
	}
	req.addHeader("User-Agent", quotedFields[1])
	req.addHeader("X-Request-Id", quotedFields[2])
	req.Host = quotedFields[3]
	return nil
}
