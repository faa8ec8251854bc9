package adaptive

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// A real server behind the middleware: with its one default slot taken, a
// second default request is shed with 503, Retry-After and the
// temporary-reduced-capacity problem type, while a critical one is served;
// the Observe hook hears every request.
func TestMiddlewareShedsWith503(t *testing.T) {
	l := mustNew(t, fixed(2, Options{Shares: Shares{Default: 0.5}, RetryAfter: 3 * time.Second}))
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	var (
		mu   sync.Mutex
		seen []Admission
	)
	h := Middleware(l, MiddlewareOptions{
		Class: func(r *http.Request) Class {
			c, _ := ParseClass(r.Header.Get("Priority"))
			return c
		},
		Observe: func(r *http.Request, a Admission) {
			mu.Lock()
			seen = append(seen, a)
			mu.Unlock()
		},
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			entered <- struct{}{}
			<-release
		}
		io.WriteString(w, "ok")
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(path, class string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Header.Set("Priority", class)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	held := make(chan *http.Response)
	go func() { held <- get("/hold", "default") }()
	<-entered

	resp := get("/", "default")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var p struct {
		Type       string `json:"type"`
		Status     int    `json:"status"`
		RetryAfter int    `json:"retry_after"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "3" || resp.Header.Get("Content-Type") != "application/problem+json" ||
		p.Type != "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity" || p.Status != 503 || p.RetryAfter != 3 {
		t.Errorf("shed: %d %v %s, want 503 with Retry-After 3 and a temporary-reduced-capacity problem", resp.StatusCode, resp.Header, body)
	}

	resp = get("/", "critical")
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("critical request: %d, want 200 above the default share", resp.StatusCode)
	}
	close(release)
	if resp := <-held; resp.StatusCode != 200 {
		t.Errorf("held request: %d, want 200", resp.StatusCode)
	} else {
		resp.Body.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 3 || !seen[0].Admitted || seen[1].Admitted || seen[1].Reason != NoSlot || seen[1].Class != Default || !seen[2].Admitted || seen[2].Class != Critical {
		t.Errorf("observed %+v, want the held request admitted, the default one shed (limit), the critical one admitted", seen)
	}
	if st := l.Stats(); st.InFlight != 0 {
		t.Errorf("%d in flight after every response, want 0", st.InFlight)
	}
}

// Serve takes the sample when the status is known: a 502, 503 or 504 is
// the upstream overloaded, another status a latency, and nothing at all
// when the client has gone away or the handler panicked.
func TestServeRecordsTheOutcome(t *testing.T) {
	for _, tc := range []struct {
		name           string
		handler        http.HandlerFunc
		cancel         bool
		samples, drops int
		wantPanic      bool
	}{
		{"200", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }, false, 1, 0, false},
		{"no write", func(w http.ResponseWriter, r *http.Request) {}, false, 1, 0, false},
		{"404", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(404) }, false, 1, 0, false},
		{"503", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) }, false, 0, 1, false},
		{"504 after 103", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(103); w.WriteHeader(504) }, false, 0, 1, false},
		{"flushed", func(w http.ResponseWriter, r *http.Request) { w.(http.Flusher).Flush() }, false, 1, 0, false},
		{"client gone", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(502) }, true, 0, 0, false},
		{"panic", func(w http.ResponseWriter, r *http.Request) { panic(http.ErrAbortHandler) }, false, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := mustNew(t, fixed(5, Options{}))
			s := hold(t, l, Default)
			// The first sample ends the first probe: count from the next.
			l.st.g.started, l.st.g.probing = true, false
			l.st.g.nextProbe = time.Now().Add(time.Hour)
			ctx, cancel := context.WithCancel(context.Background())
			if tc.cancel {
				cancel()
			}
			defer cancel()
			r := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
			func() {
				defer func() {
					if p := recover(); (p != nil) != tc.wantPanic {
						t.Errorf("panic %v, want one: %v", p, tc.wantPanic)
					}
				}()
				Serve(s, tc.handler, httptest.NewRecorder(), r)
			}()
			g := &l.st.g
			if len(g.win) != tc.samples || g.drops != tc.drops {
				t.Errorf("%d samples and %d drops, want %d and %d", len(g.win), g.drops, tc.samples, tc.drops)
			}
			if st := l.Stats(); st.InFlight != 0 {
				t.Errorf("%d in flight after Serve, want 0", st.InFlight)
			}
		})
	}
}

func TestOutcomeOf(t *testing.T) {
	for code, want := range map[int]Outcome{200: Succeeded, 429: Succeeded, 500: Succeeded, 502: Overloaded, 503: Overloaded, 504: Overloaded} {
		if got := OutcomeOf(code); got != want {
			t.Errorf("OutcomeOf(%d) = %v, want %v", code, got, want)
		}
	}
}
