package problem_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/problem"
)

func TestBody(t *testing.T) {
	// What http.MaxBytesReader returns past its limit.
	w := httptest.NewRecorder()
	_, tooBig := io.ReadAll(http.MaxBytesReader(w, io.NopCloser(strings.NewReader("12345")), 4))
	deadline := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	for _, tc := range []struct {
		name       string
		err        error
		status     int
		detail     string
		connection string
	}{
		{"over the limit", tooBig, 413, "the body is larger than 4 bytes", ""},
		{"over the limit, wrapped", fmt.Errorf("decoding: %w", tooBig), 413, "the body is larger than 4 bytes", ""},
		{"read deadline", deadline, 408, "the request body did not arrive in time", "close"},
		{"broken off", io.ErrUnexpectedEOF, 400, "not JSON", ""},
		{"not JSON", &json.SyntaxError{}, 400, "not JSON", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := problem.BodyStatus(tc.err); got != tc.status {
				t.Errorf("BodyStatus: got %d, want %d", got, tc.status)
			}
			w := httptest.NewRecorder()
			problem.Body(w, tc.err, 4, "not JSON")
			var p struct {
				Type, Title, Detail string
				Status              int
			}
			if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
				t.Fatalf("body %q: %v", w.Body, err)
			}
			want := struct {
				Type, Title, Detail string
				Status              int
			}{"about:blank", http.StatusText(tc.status), tc.detail, tc.status}
			if w.Code != tc.status || p != want {
				t.Errorf("got %d %+v, want %d %+v", w.Code, p, tc.status, want)
			}
			h := w.Header()
			if h.Get("Content-Type") != "application/problem+json" || h.Get("Cache-Control") != "no-store" || h.Get("Content-Length") != fmt.Sprint(w.Body.Len()) || h.Get("Connection") != tc.connection {
				t.Errorf("headers %v, want a problem document's, Connection %q", h, tc.connection)
			}
		})
	}
}

func TestUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		secs   int64
		detail string
		body   string
		retry  string
	}{
		{"one second", 1, "The rate limiter cannot decide", `{"type":"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity","title":"Service Unavailable","status":503,"detail":"The rate limiter cannot decide; retry after 1 second.","retry_after":1}` + "\n", "1"},
		{"seconds", 5, "Shed \"to protect\" the upstream", `{"type":"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity","title":"Service Unavailable","status":503,"detail":"Shed \"to protect\" the upstream; retry after 5 seconds.","retry_after":5}` + "\n", "5"},
		{"at least one second", 0, "x", `{"type":"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity","title":"Service Unavailable","status":503,"detail":"x; retry after 1 second.","retry_after":1}` + "\n", "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			problem.Unavailable(w, tc.secs, tc.detail)
			if w.Code != http.StatusServiceUnavailable || w.Body.String() != tc.body {
				t.Errorf("got %d %s, want 503 %s", w.Code, w.Body, tc.body)
			}
			if !json.Valid(w.Body.Bytes()) {
				t.Errorf("body %s is not JSON", w.Body)
			}
			h := w.Header()
			if h.Get("Retry-After") != tc.retry || h.Get("Content-Type") != "application/problem+json" || h.Get("Cache-Control") != "no-store" || h.Get("Content-Length") != fmt.Sprint(w.Body.Len()) {
				t.Errorf("headers %v, want Retry-After %s and a problem document's", h, tc.retry)
			}
		})
	}
}
