package replay

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
)

func TestParseCombined(t *testing.T) {
	at := time.Date(2023, 10, 10, 13, 55, 36, 0, time.UTC).UnixNano()
	tests := []struct {
		name, line                 string
		err                        error
		client, method, target, ua string
		xff                        string
		status                     int
		time                       int64
	}{
		{name: "nginx combined", line: `203.0.113.7 - - [10/Oct/2023:13:55:36 +0000] "GET /a?b=1 HTTP/1.1" 200 512 "https://ex.com/" "curl/8.5.0"`,
			client: "203.0.113.7", method: "GET", target: "/a?b=1", ua: "curl/8.5.0", status: 200, time: at},
		{name: "nginx main, with X-Forwarded-For", line: `10.0.0.2 - alice [10/Oct/2023:15:55:36 +0200] "POST /login HTTP/2.0" 429 0 "-" "Mozilla/5.0 (X11)" "198.51.100.9, 10.0.0.1"`,
			client: "10.0.0.2", method: "POST", target: "/login", ua: "Mozilla/5.0 (X11)", xff: "198.51.100.9, 10.0.0.1", status: 429, time: at},
		{name: "Traefik's CLF", line: `192.168.2.20 - - [10/Oct/2023:06:55:36 -0700] "GET /apache_pb.gif HTTP/1.1" 200 2326 "http://www.example.com/start.html" "Mozilla/4.08 [en] (Win98; I ;Nav)" 1 "Host-traefik.docker.localhost" "http://172.17.0.3:80" 5ms`,
			client: "192.168.2.20", method: "GET", target: "/apache_pb.gif", ua: "Mozilla/4.08 [en] (Win98; I ;Nav)", status: 200, time: at},
		{name: "common", line: `::1 - - [10/Oct/2023:13:55:36 +0000] "HEAD / HTTP/1.0" 304 -`,
			client: "::1", method: "HEAD", target: "/", status: 304, time: at},
		{name: "escapes", line: `1.2.3.4 - - [10/Oct/2023:13:55:36 +0000] "GET /q\x22x HTTP/1.1" 200 1 "-" "a \"b\" \\c"`,
			client: "1.2.3.4", method: "GET", target: `/q"x`, ua: `a "b" \c`, status: 200, time: at},
		{name: "a user with a space", line: `1.2.3.4 - bob smith [10/Oct/2023:13:55:36 +0000] "GET /x HTTP/1.1" 200 1`,
			client: "1.2.3.4", method: "GET", target: "/x", status: 200, time: at},
		{name: "absolute form", line: `1.2.3.4 - - [10/Oct/2023:13:55:36 +0000] "GET http://api.example.com/x HTTP/1.1" 200 1`,
			client: "1.2.3.4", method: "GET", target: "http://api.example.com/x", status: 200, time: at},
		{name: "escapes in the path and the query", line: `1.2.3.4 - - [10/Oct/2023:13:55:36 +0000] "GET /a%41?q=%zz HTTP/1.1" 200 1`,
			client: "1.2.3.4", method: "GET", target: "/a%41?q=%zz", status: 200, time: at},
		{name: "a bad escape in the path", line: `1.2.3.4 - - [10/Oct/2023:13:55:36 +0000] "GET /api/%zz HTTP/1.1" 400 0`, err: errTarget},
		{name: "an escape cut short", line: `1.2.3.4 - - [10/Oct/2023:13:55:36 +0000] "GET /api/%4 HTTP/1.1" 400 0`, err: errTarget},
		{name: "a bad escape in an absolute target", line: `1.2.3.4 - - [10/Oct/2023:13:55:36 +0000] "GET http://h/%zz HTTP/1.1" 400 0`, err: errTarget},
		{name: "an absolute target's bad host", line: `1.2.3.4 - - [10/Oct/2023:13:55:36 +0000] "GET http://[::1/x HTTP/1.1" 400 0`, err: errTarget},
		{name: "no request", line: `1.2.3.4 - - [10/Oct/2023:13:55:36 +0000] "-" 400 0 "-" "-"`, err: errNoRequest},
		{name: "TLS on the HTTP port", line: `1.2.3.4 - - [10/Oct/2023:13:55:36 +0000] "\x16\x03\x01\x02\x00\x01\x00\x01\xFC\x03\x03" 400 157 "-" "-"`, err: errNoRequest},
		{name: "bad time", line: `1.2.3.4 - - [10/Foo/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 1`, err: errTime},
		{name: "29 February of a common year", line: `1.2.3.4 - - [29/Feb/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 1`, err: errTime},
		{name: "bad status", line: `1.2.3.4 - - [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 2000 1`, err: errStatus},
		{name: "unterminated", line: `1.2.3.4 - - [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1`, err: errSyntax},
		{name: "not combined", line: `{"time":"x"}`, err: errSyntax},
		{name: "garbage", line: "\x00\x01\x02 \xff\xfe", err: errSyntax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p combinedParser
			var req Request
			err := p.parse([]byte(tt.line), &req)
			if !errors.Is(err, tt.err) {
				t.Fatalf("got error %v, want %v", err, tt.err)
			}
			if err != nil {
				return
			}
			if string(req.Client) != tt.client || string(req.Method) != tt.method || string(req.Target) != tt.target || req.Status != tt.status || req.Time != tt.time {
				t.Errorf("got %q %q %q %d at %d; want %q %q %q %d at %d", req.Client, req.Method, req.Target, req.Status, req.Time, tt.client, tt.method, tt.target, tt.status, tt.time)
			}
			if got := header(&req, "User-Agent"); got != tt.ua {
				t.Errorf("User-Agent %q, want %q", got, tt.ua)
			}
			if got := header(&req, "X-Forwarded-For"); got != tt.xff {
				t.Errorf("X-Forwarded-For %q, want %q", got, tt.xff)
			}
		})
	}
}

func header(r *Request, name string) string {
	for _, h := range r.Headers {
		if h.Name == name {
			return string(h.Value)
		}
	}
	return ""
}

// TestParseCaddy reads lines of Caddy's JSON access log, as Caddy 2.6
// writes them and with the fields later versions add.
func TestParseCaddy(t *testing.T) {
	p := newCaddyParser()
	var req Request
	line := `{"level":"info","ts":1795721148.4294543,"logger":"http.log.access.log0","msg":"handled request","request":{"remote_ip":"127.0.0.1","remote_port":"49776","client_ip":"198.51.100.9","proto":"HTTP/1.1","method":"GET","host":"api.example.com:8080","uri":"/api/a%20b?x=1","headers":{"User-Agent":["ua \"x\""],"Accept":["*/*"],"X-Forwarded-For":["1.2.3.4","5.6.7.8"],"X-Empty":[],"Bad Name":["x"],"X-Esc":["a\u00e9","b\\c","d"]},"tls":{"resumed":false}},"user_id":"","duration":0.000022093,"size":2,"status":429,"resp_headers":{"Server":["Caddy"]}}`
	if err := p.parse([]byte(line), &req); err != nil {
		t.Fatal(err)
	}
	if req.Time != 1795721148429454300 || string(req.Client) != "127.0.0.1" || string(req.Method) != "GET" || string(req.Target) != "/api/a%20b?x=1" || string(req.Host) != "api.example.com:8080" || req.Status != 429 {
		t.Errorf("got time %d, client %q, %q %q, host %q, status %d", req.Time, req.Client, req.Method, req.Target, req.Host, req.Status)
	}
	for name, want := range map[string]string{"User-Agent": `ua "x"`, "Accept": "*/*", "X-Forwarded-For": "1.2.3.4, 5.6.7.8", "X-Empty": "", "Bad Name": "", "X-Esc": `aé, b\c, d`} {
		if got := header(&req, name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	for _, tt := range []struct {
		line string
		err  error
	}{
		{`{"ts":"2026-11-26T10:00:00Z","request":{"method":"GET","uri":"/"},"status":200}`, nil},
		{`{"ts":1795721148,"request":{"method":"GET","uri":"/"}}`, nil},
		{`{"request":{"method":"GET","uri":"/"}}`, errMissingTime},
		{`{"ts":"yesterday","request":{"method":"GET","uri":"/"}}`, errTime},
		{`{"ts":1795721148,"msg":"handled request"}`, errMissingReq},
		{`{"ts":1795721148,"request":null}`, errMissingReq},
		{`{"ts":1795721148,"request":{"method":"GET","uri":"/api/%zz"}}`, errTarget},
		{`{"ts":1795721148,"request":{"method":"G ET","uri":"/"}}`, errMethod},
		{`{"ts":1795721148,"request":{"method":"GET","uri":"/","headers":{"A":"b"}}}`, errJSON},
		{`{"ts":1795721148,"request":{"method":"GET","uri":"/"}`, errJSON},
		{`{"ts":1795721148,"request":{"method":"GET","uri":"/"}} x`, errJSON},
		{`1.2.3.4 - - [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 1`, errJSON},
	} {
		if err := p.parse([]byte(tt.line), &req); !errors.Is(err, tt.err) {
			t.Errorf("%.60q: got %v, want %v", tt.line, err, tt.err)
		}
	}
}

// TestParseIstio reads lines of Istio's default format: the downstream
// address is the connection's, and the address Envoy appended to
// X-Forwarded-For for it is not part of the header the request came with.
func TestParseIstio(t *testing.T) {
	const head = `[2026-11-25T21:26:18.409Z] "GET /status/418 HTTP/1.1" 418 - via_upstream - "-" 0 135 4 4 `
	const mid = ` "curl/8.5.0" "84961386-6d84-929d-98bd-c5aee93b5c88" "httpbin:8000" "10.44.1.27:80" outbound|8000||httpbin.foo.svc.cluster.local 10.44.1.23:37652 10.0.45.184:8000 `
	p := envoyParser{layout: &istioDefault}
	for _, tt := range []struct {
		name, xff, down string
		client, sent    string
	}{
		{name: "a sidecar", xff: `"-"`, down: "10.44.1.23:46520", client: "10.44.1.23:46520"},
		{name: "a gateway that appends the address", xff: `"198.51.100.3, 203.0.113.5"`, down: "203.0.113.5:4242", client: "203.0.113.5:4242", sent: "198.51.100.3"},
		{name: "a gateway that appends nothing", xff: `"198.51.100.3"`, down: "[2001:db8::7]:443", client: "[2001:db8::7]:443", sent: "198.51.100.3"},
		{name: "IPv6, appended", xff: `"198.51.100.3,2001:db8::7"`, down: "[2001:db8::7]:443", client: "[2001:db8::7]:443", sent: "198.51.100.3"},
		{name: "no downstream address", xff: `"198.51.100.3, 203.0.113.5"`, down: "-", client: "203.0.113.5", sent: "198.51.100.3"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			line := head + tt.xff + mid + tt.down + " outbound_.8000_._.httpbin.foo.svc.cluster.local default"
			var req Request
			if err := p.parse([]byte(line), &req); err != nil {
				t.Fatal(err)
			}
			want := time.Date(2026, 11, 25, 21, 26, 18, 409e6, time.UTC).UnixNano()
			if req.Time != want || string(req.Method) != "GET" || string(req.Target) != "/status/418" || req.Status != 418 || string(req.Host) != "httpbin:8000" || header(&req, "User-Agent") != "curl/8.5.0" {
				t.Errorf("got %+v", req)
			}
			if string(req.Client) != tt.client || header(&req, "X-Forwarded-For") != tt.sent {
				t.Errorf("client %q, X-Forwarded-For %q; want %q, %q", req.Client, header(&req, "X-Forwarded-For"), tt.client, tt.sent)
			}
		})
	}
	envoy := `[2016-04-15T20:17:00.310Z] "POST /api/v1/locations HTTP/2" 204 - 154 0 226 100 "10.0.35.28" "nsq2http" "cc21d9b0-cf5c-432b-8c7e-98aeb7988cd2" "locations" "tcp://10.0.2.1:80"`
	istio := head + `"-"` + mid + "10.44.1.23:46520 - default"
	var req Request
	for _, bad := range []string{envoy, head + `"-"` + mid, head + `"-" "curl/8.5.0"`} {
		if err := p.parse([]byte(bad), &req); !errors.Is(err, errSyntax) {
			t.Errorf("istio, %.50q...: got %v, want %v", bad, err, errSyntax)
		}
	}
	if err := (envoyParser{}).parse([]byte(istio), &req); !errors.Is(err, errSyntax) {
		t.Errorf("envoy, an Istio line: got %v, want %v", err, errSyntax)
	}
}

func TestParseEnvoy(t *testing.T) {
	line := `[2016-04-15T20:17:00.310Z] "POST /api/v1/locations HTTP/2" 204 - 154 0 226 100 "198.51.100.3, 10.0.35.28" "nsq2http" "cc21d9b0-cf5c-432b-8c7e-98aeb7988cd2" "locations" "tcp://10.0.2.1:80"`
	var req Request
	if err := (envoyParser{}).parse([]byte(line), &req); err != nil {
		t.Fatal(err)
	}
	want := time.Date(2016, 4, 15, 20, 17, 0, 310e6, time.UTC).UnixNano()
	if req.Time != want || string(req.Method) != "POST" || string(req.Target) != "/api/v1/locations" || req.Status != 204 ||
		string(req.Client) != "10.0.35.28" || header(&req, "X-Forwarded-For") != "198.51.100.3" || string(req.Host) != "locations" || header(&req, "User-Agent") != "nsq2http" {
		t.Errorf("got %+v", req)
	}
	for _, bad := range []string{
		`[2016-04-15T20:17:00.310Z] "POST /x HTTP/2" 204 - 154 0 226 100 "a" "b" "c"`,
		`2016-04-15T20:17:00.310Z "POST /x HTTP/2" 204`,
		`[yesterday] "POST /x HTTP/2" 204 - 154 0 226 100 "a" "b" "c" "d" "e"`,
	} {
		if err := (envoyParser{}).parse([]byte(bad), &req); err == nil {
			t.Errorf("%q: parsed", bad)
		}
	}
}

func TestParseJSON(t *testing.T) {
	fields, err := ParseJSONFields("time=ts,client=ip,header:X-Api-Key=key")
	if err != nil {
		t.Fatal(err)
	}
	p := newJSONParser(fields)
	var req Request
	line := `{"ts": 1696946136.25, "ip":"203.0.113.7", "request":"GET /a\u002fb?c=\"d\" HTTP/1.1", "status":"200", "key":"k-1", "http_x_plan":"gold", "http_user_agent":"\ud83d\ude00", "obj":{"x":[1,2,{"y":"]"}]}, "n":null}`
	if err := p.parse([]byte(line), &req); err != nil {
		t.Fatal(err)
	}
	if req.Time != 1696946136250000000 || string(req.Client) != "203.0.113.7" || string(req.Method) != "GET" || string(req.Target) != `/a/b?c="d"` || req.Status != 200 {
		t.Errorf("got %+v", req)
	}
	for name, want := range map[string]string{"X-Api-Key": "k-1", "X-Plan": "gold", "User-Agent": "😀"} {
		if got := header(&req, name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	p = newJSONParser(JSONFields{})
	for _, tt := range []struct {
		line string
		err  error
	}{
		{`{"time":"2023-10-10T13:55:36+02:00","remote_addr":"::1","request_method":"GET","request_uri":"/","status":200}`, nil},
		{`{"time":"10/Oct/2023:13:55:36 +0000","request_method":"GET","request_uri":"/"}`, nil},
		{`{"remote_addr":"::1","request_method":"GET","request_uri":"/"}`, errMissingTime},
		// nginx's own names for its time variables are read by default.
		{`{"time_iso8601":"2023-10-10T13:55:36+00:00","request_method":"GET","request_uri":"/"}`, nil},
		{`{"time_local":"10/Oct/2023:13:55:36 +0000","request_method":"GET","request_uri":"/"}`, nil},
		{`{"msec":"1696946136.000","request_method":"GET","request_uri":"/"}`, nil},
		{`{"time":"2023-10-10T13:55:36Z","remote_addr":"::1"}`, errMissingReq},
		{`{"time":"soon","request_method":"GET","request_uri":"/"}`, errTime},
		{`{"time":"2023-10-10T13:55:36Z","request_method":"G ET","request_uri":"/"}`, errMethod},
		{`{"time":"2023-10-10T13:55:36Z","request_method":"GET","request_uri":"/"} x`, errJSON},
		{`{"time":"2023-10-10T13:55:36Z",`, errJSON},
		{`[1,2]`, errJSON},
		{`{"a":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, errJSON},
	} {
		if err := p.parse([]byte(tt.line), &req); !errors.Is(err, tt.err) {
			t.Errorf("%.60q: got %v, want %v", tt.line, err, tt.err)
		}
	}
	// The first time field a line has is its time; a time field named
	// with --json-fields is the only one read.
	if err := p.parse([]byte(`{"msec":1696946136.5,"time_iso8601":"2023-10-10T13:55:37+00:00","request":"GET / HTTP/1.1"}`), &req); err != nil || req.Time != 1696946136500000000 {
		t.Errorf("msec, then time_iso8601: got %d, %v; want 1696946136500000000", req.Time, err)
	}
	if err := newJSONParser(JSONFields{Time: "ts"}).parse([]byte(`{"time":"2023-10-10T13:55:36Z","request":"GET / HTTP/1.1"}`), &req); !errors.Is(err, errMissingTime) {
		t.Errorf("time=ts, a line with time only: got %v, want %v", err, errMissingTime)
	}
	for _, bad := range []string{"time", "colour=x", "header:Bad Name=x", "client="} {
		if _, err := ParseJSONFields(bad); !errors.Is(err, ErrUsage) {
			t.Errorf("ParseJSONFields(%q): got %v, want ErrUsage", bad, err)
		}
	}
}

// TestBadLogs replays logs that are empty, broken, huge, unsorted or
// garbage: each gives its counts, and none stops the replay.
func TestBadLogs(t *testing.T) {
	cfg := loadTestConfig(t, "testdata/known.yaml")
	good := func(sec int) string {
		return `192.0.2.1 - - [20/Nov/2026:12:00:` + string(rune('0'+sec/10)) + string(rune('0'+sec%10)) + ` +0000] "GET /api/x HTTP/1.1" 200 1 "-" "t"` + "\n"
	}
	garbage := make([]byte, 4096)
	for i := range garbage {
		garbage[i] = byte(i * 7919 % 251)
	}
	tests := []struct {
		name                            string
		log                             string
		tolerance                       time.Duration
		lines, unparsed, requests, late int64
		firstBad                        []int64
	}{
		{name: "empty", log: ""},
		{name: "no final newline", log: good(1) + strings.TrimSuffix(good(2), "\n"), lines: 2, requests: 2},
		{name: "CRLF", log: strings.ReplaceAll(good(1)+good(2), "\n", "\r\n"), lines: 2, requests: 2},
		{name: "blank and broken lines", log: good(1) + "\n" + "oops\n" + good(2) + `1.2.3.4 - - [20/Nov/2026:12:00:03 +0000] "GET /x` + "\n",
			lines: 5, unparsed: 3, requests: 2, firstBad: []int64{2, 3, 5}},
		{name: "a huge line", log: good(1) + strings.Repeat("x", MaxLineBytes+10) + "\n" + good(2), lines: 3, unparsed: 1, requests: 2, firstBad: []int64{2}},
		{name: "a long line within the limit", log: good(1) + `1.2.3.4 - - [20/Nov/2026:12:00:02 +0000] "GET /` + strings.Repeat("a", 300000) + ` HTTP/1.1" 200 1` + "\n", lines: 2, requests: 2},
		{name: "binary garbage", log: good(1) + string(garbage) + "\n" + good(2), lines: 2 + int64(bytes.Count(garbage, []byte("\n"))) + 1,
			unparsed: int64(bytes.Count(garbage, []byte("\n"))) + 1, requests: 2},
		{name: "unsorted within the tolerance", log: good(5) + good(3) + good(4) + good(9) + good(6), tolerance: 5 * time.Second, lines: 5, requests: 5},
		{name: "unsorted beyond the tolerance", log: good(5) + good(3) + good(9) + good(1), tolerance: 2 * time.Second, lines: 4, requests: 4, late: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := Run(context.Background(), Options{Config: cfg, Logs: []string{"-"}, Stdin: strings.NewReader(tt.log), Tolerance: tt.tolerance})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Lines != tt.lines || rep.Unparsed != tt.unparsed || rep.Requests != tt.requests || rep.Late != tt.late {
				t.Errorf("lines %d, unparsed %d, requests %d, late %d; want %d, %d, %d, %d", rep.Lines, rep.Unparsed, rep.Requests, rep.Late, tt.lines, tt.unparsed, tt.requests, tt.late)
			}
			for i, n := range tt.firstBad {
				if i >= len(rep.UnparsedLines) || rep.UnparsedLines[i].Line != n {
					t.Errorf("unparsed lines %+v, want line %d at %d", rep.UnparsedLines, n, i)
				}
			}
			var sum int64
			for _, r := range rep.UnparsedReasons {
				sum += r.Lines
			}
			if sum != rep.Unparsed {
				t.Errorf("the reasons count %d lines, unparsed %d", sum, rep.Unparsed)
			}
			if int64(len(rep.UnparsedLines)) != min(rep.Unparsed, MaxListedLines) {
				t.Errorf("%d unparsed lines listed of %d", len(rep.UnparsedLines), rep.Unparsed)
			}
			if err := WriteText(&bytes.Buffer{}, rep); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestLateLinesDecidedAtTheLatestTime: within the tolerance a line is
// decided at its own time, beyond it at the latest time reached.
func TestLateLinesDecidedAtTheLatestTime(t *testing.T) {
	cfg := loadTestConfig(t, "testdata/known.yaml")
	// /sl/ allows 10 a minute: 10 at 12:01:00 fill it; a line of 12:00:30
	// decided at its own time would see them in its window only if the
	// log's clock went back.
	var b strings.Builder
	for range 10 {
		b.WriteString(`192.0.2.1 - - [20/Nov/2026:12:01:00 +0000] "GET /sl/x HTTP/1.1" 200 1` + "\n")
	}
	b.WriteString(`192.0.2.1 - - [20/Nov/2026:12:00:30 +0000] "GET /sl/x HTTP/1.1" 200 1` + "\n")
	for _, tt := range []struct {
		tolerance     time.Duration
		late, limited int64
	}{
		{tolerance: 0, late: 1, limited: 1},           // decided at 12:01:00, after the ten
		{tolerance: time.Minute, late: 0, limited: 1}, // sorted first: the ten's last is refused
	} {
		rep, err := Run(context.Background(), Options{Config: cfg, Logs: []string{"-"}, Stdin: strings.NewReader(b.String()), Tolerance: tt.tolerance})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Late != tt.late || rep.Rules[2].Limited != tt.limited {
			t.Errorf("tolerance %v: late %d, limited %d; want %d, %d", tt.tolerance, rep.Late, rep.Rules[2].Limited, tt.late, tt.limited)
		}
		if tt.late > 0 && (len(rep.LateLines) != 1 || rep.LateLines[0].Line != 11) {
			t.Errorf("late lines %+v, want line 11", rep.LateLines)
		}
	}
}

// TestLogFiles reads files, gzip ones (by name and by content), several
// merged by time, and reports the ones it cannot read.
func TestLogFiles(t *testing.T) {
	cfg := loadTestConfig(t, "testdata/known.yaml")
	dir := t.TempDir()
	hs := knownTraffic()
	log := writeLog(t, Combined, hs)
	lines := bytes.SplitAfter(log, []byte("\n"))
	// Two gateways' logs: alternate lines, one of them gzipped, another
	// gzipped under a name without .gz.
	var a, b bytes.Buffer
	for i, l := range lines {
		if i%2 == 0 {
			a.Write(l)
		} else {
			b.Write(l)
		}
	}
	write := func(name string, data []byte, gz bool) string {
		path := filepath.Join(dir, name)
		if gz {
			var z bytes.Buffer
			w := gzip.NewWriter(&z)
			w.Write(data)
			w.Close()
			data = z.Bytes()
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	whole, err := Run(context.Background(), Options{Config: cfg, Logs: []string{write("all.log", log, false)}})
	if err != nil {
		t.Fatal(err)
	}
	merged, err := Run(context.Background(), Options{Config: cfg, Logs: []string{write("a.log.gz", a.Bytes(), true), write("b.log", b.Bytes(), true)}})
	if err != nil {
		t.Fatal(err)
	}
	if merged.Requests != whole.Requests || merged.Late != 0 {
		t.Fatalf("merged: %d requests, %d late; want %d, 0", merged.Requests, merged.Late, whole.Requests)
	}
	for i := range whole.Rules {
		if w, m := whole.Rules[i], merged.Rules[i]; w.Limited != m.Limited || w.Admitted != m.Admitted {
			t.Errorf("%s: merged admitted %d, limited %d; one log %d, %d", w.Rule, m.Admitted, m.Limited, w.Admitted, w.Limited)
		}
	}
	// A truncated gzip stream: replayed up to the break, and said.
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	w.Write(log)
	w.Close()
	cut := write("cut.log.gz", z.Bytes()[:z.Len()/2], false)
	rep, err := Run(context.Background(), Options{Config: cfg, Logs: []string{cut}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.ReadErrors) != 1 || !strings.Contains(rep.ReadErrors[0], "cut.log.gz") || rep.Requests == 0 {
		t.Errorf("truncated gzip: read errors %q, %d requests", rep.ReadErrors, rep.Requests)
	}
	for _, bad := range []string{filepath.Join(dir, "missing.log"), dir} {
		if _, err := Run(context.Background(), Options{Config: cfg, Logs: []string{bad}}); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
	if _, err := Run(context.Background(), Options{Config: cfg, Logs: []string{write("bad.gz", []byte("plain"), false)}}); err == nil || !strings.Contains(err.Error(), "gzip") {
		t.Errorf("a .gz that is not gzip: got %v", err)
	}
}

// The fuzz targets: no input makes a parser panic, and what a parser
// accepts is a request replay can rebuild.

// FuzzCheckTarget holds checkTarget to net/http's server, which answers 400
// without calling a handler for a target url.ParseRequestURI refuses: a
// target replay accepts is one the server reads, and an origin-form target
// ("/...") the server reads is one replay accepts. (Replay refuses
// absolute targets with other schemes than http and https, which the
// server would read, as the gateways whose logs it reads refuse them.)
func FuzzCheckTarget(f *testing.F) {
	for _, s := range []string{"/", "*", "/a%41?q=%zz", "/api/%zz", "/%4", "http://h/%zz", "http://[::1/x", "HTTPS://h:80/a", "http://h:x/", "//x", "/a#b", "foo:bar"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ok := checkTarget([]byte(s)) == nil
		_, err := url.ParseRequestURI(s)
		if ok && err != nil {
			t.Fatalf("replay accepts %q, which net/http refuses: %v", s, err)
		}
		if !ok && err == nil && strings.HasPrefix(s, "/") && !strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			t.Fatalf("replay refuses %q, which net/http reads", s)
		}
	})
}

func checkParsed(t *testing.T, req *Request) {
	t.Helper()
	if !isToken(req.Method) || checkTarget(req.Target) != nil || req.Time < 0 || req.Status != 0 && (req.Status < 100 || req.Status > 999) {
		t.Fatalf("accepted %+v", req)
	}
	d, err := newDecider(loadFuzzConfig(t), false)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	if err := d.decide(req, req.Time); err != nil {
		t.Fatal(err)
	}
}

func loadFuzzConfig(t *testing.T) *config.Config { return loadTestConfig(t, "testdata/live.yaml") }

func FuzzParseCombined(f *testing.F) {
	f.Add([]byte(`203.0.113.7 - - [10/Oct/2023:13:55:36 +0000] "GET /a?b=1 HTTP/1.1" 200 512 "https://ex.com/" "curl/8.5.0" "1.2.3.4"`))
	f.Add([]byte(`1.2.3.4 - - [10/Oct/2023:13:55:36 +0000] "GET /q\x22x HTTP/1.1" 200 1 "-" "a \"b\""`))
	f.Add([]byte(`1.2.3.4 - - [10/Oct/2023:13:55:36 +0000] "-" 400 0 "-" "-"`))
	f.Fuzz(func(t *testing.T, line []byte) {
		var p combinedParser
		var req Request
		if p.parse(line, &req) == nil {
			checkParsed(t, &req)
		}
	})
}

func FuzzParseJSON(f *testing.F) {
	f.Add([]byte(`{"time":"2023-10-10T13:55:36.5+02:00","remote_addr":"::1","request":"GET / HTTP/1.1","status":200,"http_x":"\u00e9"}`))
	f.Add([]byte(`{"time":1696946136,"request_method":"GET","request_uri":"/","a":{"b":["c",{"d":null}]}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		var req Request
		if newJSONParser(JSONFields{}).parse(line, &req) == nil {
			checkParsed(t, &req)
		}
	})
}

func FuzzParseEnvoy(f *testing.F) {
	f.Add([]byte(`[2016-04-15T20:17:00.310Z] "POST /api/v1/locations HTTP/2" 204 - 154 0 226 100 "10.0.35.28" "nsq2http" "cc21d9b0" "locations" "tcp://10.0.2.1:80"`))
	f.Add([]byte(`[2026-11-25T21:26:18.409Z] "GET /status/418 HTTP/1.1" 418 - via_upstream - "-" 0 135 4 4 "198.51.100.3, 10.44.1.23" "curl/8.5.0" "8496" "httpbin:8000" "10.44.1.27:80" outbound|8000||httpbin 10.44.1.23:37652 10.0.45.184:8000 10.44.1.23:46520 - default`))
	f.Fuzz(func(t *testing.T, line []byte) {
		for _, p := range []envoyParser{{}, {layout: &istioDefault}} {
			var req Request
			if p.parse(line, &req) == nil {
				checkParsed(t, &req)
			}
		}
	})
}

func FuzzParseCaddy(f *testing.F) {
	f.Add([]byte(`{"level":"info","ts":1795721148.4294543,"logger":"http.log.access.log0","msg":"handled request","request":{"remote_ip":"127.0.0.1","remote_port":"49776","proto":"HTTP/1.1","method":"GET","host":"h:8080","uri":"/api/a%20b?x=1","headers":{"User-Agent":["ua \"x\""],"X-Forwarded-For":["1.2.3.4","5.6.7.8"]}},"duration":0.00002,"size":2,"status":200}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		var req Request
		if newCaddyParser().parse(line, &req) == nil {
			checkParsed(t, &req)
		}
	})
}

// FuzzParseTime holds the timestamp parsers to package time.
func FuzzParseTime(f *testing.F) {
	f.Add("2023-10-10T13:55:36.123456789+02:00")
	f.Add("10/Oct/2023:13:55:36 -0700")
	f.Add("1696946136.5")
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseRFC3339([]byte(s))
		if want, err := time.Parse(time.RFC3339Nano, s); err == nil && want.Year() >= 1970 && want.Year() <= maxYear && !strings.ContainsAny(s, "tz ,") && len(s) <= 35 &&
			len(s) >= 20 && s[13] == ':' && s[16] == ':' { // time.Parse takes one-digit hours too
			if !ok || got != want.UnixNano() {
				t.Fatalf("parseRFC3339(%q) = %d, %v; time.Parse gives %d", s, got, ok, want.UnixNano())
			}
		}
		got, ok = parseLocalTime([]byte(s))
		// time.Parse also takes one-digit hours and months in any case.
		strict := len(s) == 26 && slices.Contains(months[:], s[3:6])
		if want, err := time.Parse("02/Jan/2006:15:04:05 -0700", s); err == nil && want.Year() >= 1970 && want.Year() <= maxYear && strict {
			if !ok || got != want.UnixNano() {
				t.Fatalf("parseLocalTime(%q) = %d, %v; time.Parse gives %d", s, got, ok, want.UnixNano())
			}
		} else if ok && err != nil && !strings.Contains(err.Error(), "out of range") {
			t.Fatalf("parseLocalTime(%q) accepted what time.Parse refuses: %v", s, err)
		}
		parseEpoch([]byte(s))
	})
}

// TestByteOrderMark replays logs that begin with UTF-8's byte order mark,
// as some tools write them: the mark is not part of the first line, whose
// request is decided with the others of its client.
func TestByteOrderMark(t *testing.T) {
	cfg := loadTestConfig(t, "testdata/known.yaml")
	for _, tt := range []struct {
		format Format
		line   func(sec int) string
	}{
		{Combined, func(sec int) string {
			return fmt.Sprintf(`192.0.2.1 - - [20/Nov/2026:12:00:%02d +0000] "GET /sl/x HTTP/1.1" 200 1`, sec)
		}},
		{JSON, func(sec int) string {
			return fmt.Sprintf(`{"time":"2026-11-20T12:00:%02dZ","remote_addr":"192.0.2.1","request":"GET /sl/x HTTP/1.1"}`, sec)
		}},
	} {
		t.Run(tt.format.String(), func(t *testing.T) {
			log := "\xef\xbb\xbf"
			for sec := range 11 { // one more than the sl rule's 10 a minute
				log += tt.line(sec) + "\n"
			}
			rep, err := Run(context.Background(), Options{Config: cfg, Logs: []string{"-"}, Stdin: strings.NewReader(log), Format: tt.format})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Requests != 11 || rep.Unparsed != 0 {
				t.Fatalf("requests %d, unparsed %d %v; want 11, 0", rep.Requests, rep.Unparsed, rep.UnparsedLines)
			}
			for _, rr := range rep.Rules {
				if rr.Rule == "sl" && (rr.Clients != 1 || rr.Limited != 1) {
					t.Errorf("rule sl: %d clients, %d limited; want 1 client, 1 limited", rr.Clients, rr.Limited)
				}
			}
		})
	}
}
