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
//
// Istio's default format (since Istio 1.9) is Envoy's with fields added:
//
//	[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%"
//	%RESPONSE_CODE% %RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS% %CONNECTION_TERMINATION_DETAILS%
//	"%UPSTREAM_TRANSPORT_FAILURE_REASON%" %BYTES_RECEIVED% %BYTES_SENT% %DURATION%
//	%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%" "%REQ(USER-AGENT)%"
//	"%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%" %UPSTREAM_CLUSTER%
//	%UPSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_REMOTE_ADDRESS%
//	%REQUESTED_SERVER_NAME% %ROUTE_NAME%
//
// It logs the downstream address, which is the connection's; an address
// Envoy appended to X-Forwarded-For (the same as the downstream's) is
// removed from the header, as for Envoy's format. Fields after the
// downstream address are not read.

// envoyLayout says which fields follow a line's request line, and which of
// them replay reads (by their index; -1 for none).
type envoyLayout struct {
	// fields has a byte per field: 'u' for one unquoted, 'q' for one in
	// double quotes.
	fields                                     string
	status, xff, ua, id, authority, downstream int
}

var (
	envoyDefault = envoyLayout{fields: "uuuuuuqqqqq", status: 0, xff: 6, ua: 7, id: 8, authority: 9, downstream: -1}
	istioDefault = envoyLayout{fields: "uuuuquuuuqqqqquuuu", status: 0, xff: 9, ua: 10, id: 11, authority: 12, downstream: 17}
)

// maxEnvoyFields is the most fields a layout has after the request line.
const maxEnvoyFields = 18

// envoyParser parses Envoy's default format, or Istio's with layout
// istioDefault.
type envoyParser struct{ layout *envoyLayout }

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

func (p envoyParser) parse(line []byte, req *Request) error {
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
	lay := p.layout
	if lay == nil {
		lay = &envoyDefault
	}
	var fields [maxEnvoyFields][]byte
	for k := 0; k < len(lay.fields); k++ {
		if i >= len(line) || line[i] != ' ' {
			return errSyntax
		}
		i++
		if lay.fields[k] == 'q' {
			if i >= len(line) || line[i] != '"' {
				return errSyntax
			}
			if fields[k], i, ok = quoted(line, i, req); !ok {
				return errSyntax
			}
		} else {
			start := i
			for i < len(line) && line[i] != ' ' {
				i++
			}
			if i == start {
				return errSyntax // Envoy logs "-" for a field without a value
			}
			fields[k] = line[start:i]
		}
		if len(fields[k]) == 1 && fields[k][0] == '-' {
			fields[k] = nil
		}
	}
	status, err := parseStatus(fields[lay.status])
	if err != nil {
		return err
	}
	req.Status = status
	if err := parseRequestLine(reqLine, req); err != nil {
		return err
	}
	xff := fields[lay.xff]
	var down []byte
	if lay.downstream >= 0 {
		down = fields[lay.downstream]
	}
	// Envoy appends the connection's address to X-Forwarded-For when it
	// uses the remote address: the rest is the header as the request came.
	last, sent := splitLast(xff)
	switch {
	case len(down) > 0:
		// The connection's address is logged; the header's last address
		// is one Envoy appended only if it is that one.
		req.Client = down
		if !bytes.Equal(last, hostOf(down)) {
			sent = trimSpace(xff)
		}
	case len(xff) > 0:
		req.Client = last
	}
	req.addHeader("X-Forwarded-For", sent)
	req.addHeader("User-Agent", fields[lay.ua])
	req.addHeader("X-Request-Id", fields[lay.id])
	req.Host = fields[lay.authority]
	return nil
}

// splitLast splits an X-Forwarded-For value into its last address and the
// addresses before it, each without surrounding spaces.
func splitLast(xff []byte) (last, before []byte) {
	if c := lastIndexByte(xff, ','); c >= 0 {
		return trimSpace(xff[c+1:]), trimSpace(xff[:c])
	}
	return trimSpace(xff), nil
}

// hostOf returns the address of an "address:port" as Envoy logs one
// ("192.0.2.1:443", "[2001:db8::1]:443"), or a as it is without a port.
func hostOf(a []byte) []byte {
	if len(a) > 0 && a[0] == '[' {
		if j := bytes.IndexByte(a, ']'); j > 0 {
			return a[1:j]
		}
		return a
	}
	if c := bytes.IndexByte(a, ':'); c >= 0 && c == lastIndexByte(a, ':') {
		return a[:c]
	}
	return a
}
