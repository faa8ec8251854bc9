package server_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/server"
)

// rawRequest sends head (a request line and headers, ending in a blank
// line) and then body on a new connection to addr, sends nothing more, and
// returns the response: a body shorter than the head's Content-Length
// trickles, and the server's read timeout ends it.
func rawRequest(t *testing.T, addr, head, body string) (*http.Response, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Only a safeguard: the server answers as soon as its read timeout
	// ends the body, or at once for a body over the limit.
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	go func() { _, _ = io.WriteString(c, head+body) }() // an oversized body may be refused before it is all written
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	return resp, b
}

// wantProblem checks that resp is a problem document of status code whose
// detail contains detail.
func wantProblem(t *testing.T, what string, resp *http.Response, body []byte, code int, detail string) {
	t.Helper()
	var p struct {
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	err := json.Unmarshal(body, &p)
	if resp.StatusCode != code || err != nil || p.Status != code || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(p.Detail, detail) {
		t.Errorf("%s: got %d %q %s, want a %d application/problem+json document whose detail says %q", what, resp.StatusCode, resp.Header.Get("Content-Type"), body, code, detail)
	}
}

// The service's POST /json and the admin API answer a body that does not
// arrive within the read timeout 408, as the gateway does, and one over
// their limit 413, each with a problem document.
func TestSlowAndOversizedBodies(t *testing.T) {
	o := serviceOptions(t)
	o.Service.HTTP = "127.0.0.1:0"
	o.ReadTimeout = time.Second
	g, gw := startGW(t, o)
	svc := gw.Addr(server.ListenerServiceHTTP).String()
	admin := strings.TrimPrefix(g.admin, "http://")
	auth := "Authorization: Bearer " + token + "\r\n"
	const jsonReq = `{"domain":"api","descriptors":[{"entries":[{"key":"client","value":"a"}]}]}`
	const keyReq = `{"rule":"login","key":["203.0.113.9"]}`
	for _, tc := range []struct {
		name, addr, path, header string
		limit                    int
		whole                    string
	}{
		{"service /json", svc, "/json", "", 1 << 20, jsonReq},
		{"admin keys/show", admin, "/admin/v1/keys/show", auth, 64 << 10, keyReq},
	} {
		t.Run(tc.name, func(t *testing.T) {
			head := func(n int) string {
				return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: sluice\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", tc.path, tc.header, n)
			}
			// The whole request is answered: the listener works.
			if resp, b := rawRequest(t, tc.addr, head(len(tc.whole)), tc.whole); resp.StatusCode != 200 {
				t.Fatalf("a whole request: %d %s, want 200", resp.StatusCode, b)
			}
			// Half of the body, and then nothing until the read timeout.
			resp, b := rawRequest(t, tc.addr, head(len(tc.whole)), tc.whole[:len(tc.whole)/2])
			wantProblem(t, "a body that stops halfway", resp, b, http.StatusRequestTimeout, "did not arrive in time")
			if !resp.Close {
				t.Errorf("a body that stops halfway: the connection stays open, want Connection: close")
			}
			big := strings.Repeat(" ", tc.limit) + tc.whole
			resp, b = rawRequest(t, tc.addr, head(len(big)), big)
			wantProblem(t, "a body over the limit", resp, b, http.StatusRequestEntityTooLarge, fmt.Sprintf("larger than %d bytes", tc.limit))
		})
	}
}

// keys/show and keys/reset refuse a request whose remote_addr is not an IP
// address, or an IP address and a port, with a 400 naming the field.
func TestAdminRemoteAddr(t *testing.T) {
	g, _ := startGW(t, adminOptions())
	for _, tc := range []struct {
		addr string
		code int
	}{
		{"203.0.113.9", 200},
		{"203.0.113.9:443", 200},
		{"[2001:db8::1]:5", 200},
		{"2001:db8::1", 200},
		{"[2001:db8::1]", 200},
		{"::ffff:192.0.2.1", 200},
		{"999.1.1.1:-5", 400},
		{"not-an-ip", 400},
		{"999.1.1.1", 400},
		{"1.2.3.4:99999", 400},
		{"1.2.3.4:-1", 400},
		{"1.2.3.4:", 400},
		{"1.2.3.4:http", 400},
		{"[2001:db8::1]:x", 400},
		{"example.com:80", 400},
		{" 1.2.3.4", 400},
		{"1.2.3.4/32", 400},
	} {
		for _, route := range []string{"show", "reset"} {
			body := fmt.Sprintf(`{"request":{"path":"/login","remote_addr":%q}}`, tc.addr)
			code, m, h := call(t, "POST", g.admin+"/admin/v1/keys/"+route, body)
			if code != tc.code {
				t.Errorf("%s with remote_addr %q: %d %v, want %d", route, tc.addr, code, m, tc.code)
				continue
			}
			if code == 400 {
				detail, _ := m["detail"].(string)
				if h.Get("Content-Type") != "application/problem+json" || !strings.Contains(detail, "request.remote_addr") || !strings.Contains(detail, fmt.Sprintf("%q", tc.addr)) {
					t.Errorf("%s with remote_addr %q: %v, want a problem whose detail names request.remote_addr and the value", route, tc.addr, m)
				}
			}
		}
	}
}
