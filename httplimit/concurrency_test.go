package httplimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// gated is a handler that holds every request until release is closed or
// fed, and reports each arrival on started.
type gated struct {
	started chan struct{}
	release chan struct{}
}

func (g gated) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.started <- struct{}{}
	<-g.release
	if r.URL.Query().Get("panic") != "" {
		panic(http.ErrAbortHandler)
	}
	io.WriteString(w, "ok")
}

func concurrencyServer(t *testing.T, limit int64, opts httplimit.ConcurrencyOptions) (*httptest.Server, gated) {
	t.Helper()
	h, g := concurrencyHandler(t, limit, opts)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, g
}

// concurrencyHandler is the handler concurrencyServer serves, on a memory
// store that reads time.Now (the fake time of a testing/synctest bubble,
// in one).
func concurrencyHandler(t *testing.T, limit int64, opts httplimit.ConcurrencyOptions) (http.Handler, gated) {
	t.Helper()
	s := memstore.New(memstore.Options{Clock: wallClock{}, SweepInterval: -1})
	t.Cleanup(func() { s.Close() })
	c, err := sluice.NewConcurrency(s, "exports", limit, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	g := gated{started: make(chan struct{}, 16), release: make(chan struct{})}
	return httplimit.Concurrent(c, opts)(g), g
}

// status returns the status of a GET of url, or -1 if it failed: for
// goroutines, which must not call t.Fatal.
func status(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return -1
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func get(t *testing.T, url string) *http.Response {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// Requests beyond the limit in flight are answered 429 with the IETF
// fields; a slot comes back when a response ends, even a panicking one.
func TestConcurrentLimitsInFlight(t *testing.T) {
	srv, g := concurrencyServer(t, 2, httplimit.ConcurrencyOptions{})
	done := make(chan *http.Response, 2)
	for _, q := range []string{"", "?panic=1"} {
		go func() {
			resp, err := http.Get(srv.URL + q)
			if err != nil {
				done <- nil // the panicking handler aborts the connection
				return
			}
			resp.Body.Close()
			done <- resp
		}()
		<-g.started
	}
	resp := get(t, srv.URL)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third request in flight: got %d, want 429", resp.StatusCode)
	}
	if got, want := resp.Header.Get("RateLimit-Policy"), `"exports";q=2;qu="concurrent-requests"`; got != want {
		t.Errorf("RateLimit-Policy: got %s, want %s", got, want)
	}
	if got, want := resp.Header.Get("RateLimit"), `"exports";r=0;t=3600`; got != want {
		t.Errorf("RateLimit: got %s, want %s", got, want)
	}
	if got := resp.Header.Get("Retry-After"); got != "3600" {
		t.Errorf("Retry-After: got %s, want 3600", got)
	}
	close(g.release) // both responses end, one by a panic
	<-done
	<-done
	resp = get(t, srv.URL)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("after the responses ended: got %d, want 200", resp.StatusCode)
	}
	if got, want := resp.Header.Get("RateLimit"), `"exports";r=1`; got != want {
		t.Errorf("RateLimit: got %s, want %s", got, want)
	}
}

// With MaxDelay, a request waits for a slot that a response frees. The
// test runs in a testing/synctest bubble, where the wait's polls run on
// fake time.
func TestConcurrentWaitsForSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, g := concurrencyHandler(t, 1, httplimit.ConcurrencyOptions{MaxDelay: time.Minute, Poll: 5 * time.Millisecond})
		first := make(chan int)
		go func() { first <- serve(h, "/").Code }()
		<-g.started
		second := make(chan int)
		go func() { second <- serve(h, "/").Code }()
		wantWaiting(t, g)
		g.release <- struct{}{}
		if got := <-first; got != http.StatusOK {
			t.Fatalf("first: got %d, want 200", got)
		}
		<-g.started
		g.release <- struct{}{}
		if got := <-second; got != http.StatusOK {
			t.Fatalf("second, after waiting: got %d, want 200", got)
		}
	})
}

// Requests the Key function exempts never take a slot.
func TestConcurrentKeyExempts(t *testing.T) {
	srv, g := concurrencyServer(t, 1, httplimit.ConcurrencyOptions{Key: func(r *http.Request) (string, bool) {
		u := r.Header.Get("User")
		return u, u != ""
	}})
	close(g.release)
	go func() {
		for range g.started {
		}
	}()
	for range 3 {
		if resp := get(t, srv.URL); resp.StatusCode != http.StatusOK || resp.Header.Get("RateLimit") != "" {
			t.Errorf("exempt request: got %d with RateLimit %q, want 200 without", resp.StatusCode, resp.Header.Get("RateLimit"))
		}
	}
}

// failingLeases is a LeaseStore whose backend is down.
type failingLeases struct{}

var errLeasesDown = errors.New("store down")

func (failingLeases) Acquire(context.Context, string, string, string, int64, time.Duration) (sluice.LeaseStatus, error) {
	return sluice.LeaseStatus{}, errLeasesDown
}
func (failingLeases) Renew(context.Context, string, string, string, time.Duration) (sluice.LeaseStatus, error) {
	return sluice.LeaseStatus{}, errLeasesDown
}
func (failingLeases) Release(context.Context, string, string, string) (sluice.LeaseStatus, error) {
	return sluice.LeaseStatus{}, errLeasesDown
}

func TestConcurrentStoreFails(t *testing.T) {
	c, err := sluice.NewConcurrency(failingLeases{}, "c", 1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	for _, tc := range []struct {
		failOpen bool
		want     int
	}{{false, http.StatusServiceUnavailable}, {true, http.StatusOK}} {
		srv := httptest.NewServer(httplimit.Concurrent(c, httplimit.ConcurrencyOptions{FailOpen: tc.failOpen})(ok))
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("FailOpen %v: got %d, want %d", tc.failOpen, resp.StatusCode, tc.want)
		}
		if tc.want == http.StatusServiceUnavailable && !strings.Contains(string(body), httplimit.ProblemTypeUnavailable) {
			t.Errorf("503 body: got %s, want the %s problem type", body, httplimit.ProblemTypeUnavailable)
		}
	}
}
