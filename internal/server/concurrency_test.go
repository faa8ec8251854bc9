package server_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/redisstore"
)

// blockingUpstream answers each request once a token arrives on release,
// after telling started that it holds one.
type blockingUpstream struct {
	started chan struct{}
	release chan struct{}
}

func newBlockingUpstream(t *testing.T) (blockingUpstream, string) {
	t.Helper()
	u := blockingUpstream{started: make(chan struct{}, 64), release: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.started <- struct{}{}
		select {
		case <-u.release:
		case <-r.Context().Done():
		}
		w.Write([]byte("done"))
	}))
	// Unblock whatever is still waiting before the server closes.
	t.Cleanup(func() { close(u.release); srv.Close() })
	return u, srv.URL
}

func (u blockingUpstream) waitStarted(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		select {
		case <-u.started:
		case <-time.After(10 * time.Second):
			t.Fatalf("upstream: %d of %d requests arrived", i, n)
		}
	}
}

// Two gateways on one Redis share a concurrency limit: 3 requests in
// flight across both, the fourth (on either) is answered 429 with
// qu="concurrent-requests", and a slot returns as soon as a response ends.
// The rule limits the rate too, decided with the slot: refused requests are
// not charged it.
func TestTwoGatewaysShareConcurrency(t *testing.T) {
	srv := redistest.Start(t)
	up, upURL := newBlockingUpstream(t)
	opts := func() server.Options {
		return server.Options{Backend: "redis", Upstream: upURL, Redis: redisstore.Options{URL: srv.URL(), Timeout: 5 * time.Second}, Limiter: httplimit.Options{Rules: []httplimit.Rule{{
			Name: "in-flight", Key: []httplimit.KeyPart{httplimit.Global()},
			Limit:       sluice.Limit{Algorithm: sluice.TokenBucket, Count: 5, Period: time.Hour, Burst: 5},
			Concurrency: &httplimit.ConcurrencyRule{Limit: 3, Lease: time.Minute},
		}}}}
	}
	a, b := start(t, opts()), start(t, opts())
	done := make(chan *http.Response, 8)
	for i := range 3 {
		url := []string{a.url, b.url}[i%2]
		go func() { done <- get(t, "GET", url+"/x", nil) }()
	}
	up.waitStarted(t, 3)
	if sets := srv.DoList(t, "KEYS", "*}:c"); len(sets) != 1 {
		t.Fatalf("lease sets in Redis with 3 in flight: got %q, want one", sets)
	}
	for _, g := range []*running{a, b} {
		r := get(t, "GET", g.url+"/x", nil)
		if r.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("fourth in flight: got %d, want 429", r.StatusCode)
		}
		if got := r.Header.Get("RateLimit-Policy"); got != `"in-flight";q=3;qu="concurrent-requests"` {
			t.Errorf("fourth in flight: RateLimit-Policy %q, want the concurrency limit", got)
		}
	}
	up.release <- struct{}{} // one response ends: its slot returns
	if r := <-done; r.StatusCode != http.StatusOK {
		t.Fatalf("first response: got %d, want 200", r.StatusCode)
	}
	go func() { done <- get(t, "GET", b.url+"/x", nil) }()
	up.waitStarted(t, 1)
	// 4 of 5 rate units are spent: the two 429s were charged nothing.
	if r := get(t, "GET", a.url+"/x", nil); r.StatusCode != http.StatusTooManyRequests || !strings.Contains(r.Header.Get("RateLimit-Policy"), "concurrent-requests") {
		t.Fatalf("slots full again: got %d %q, want a concurrency 429", r.StatusCode, r.Header.Get("RateLimit-Policy"))
	}
	for range 3 {
		up.release <- struct{}{}
		if r := <-done; r.StatusCode != http.StatusOK || r.Header.Get("RateLimit") == "" {
			t.Fatalf("response: got %d with RateLimit %q, want 200 with the rate's", r.StatusCode, r.Header.Get("RateLimit"))
		}
	}
	go func() { done <- get(t, "GET", a.url+"/x", nil) }()
	up.waitStarted(t, 1)
	up.release <- struct{}{}
	if r := <-done; r.StatusCode != http.StatusOK || r.Header.Get("RateLimit") != `"in-flight";r=0;t=3600` {
		t.Fatalf("fifth admitted: got %d with RateLimit %q, want 200, r=0", r.StatusCode, r.Header.Get("RateLimit"))
	}
	// The rate is spent, slots are free: 429 for the rate, no slot taken.
	r := get(t, "GET", b.url+"/x", nil)
	if r.StatusCode != http.StatusTooManyRequests || r.Header.Get("RateLimit-Policy") != `"in-flight";q=5;w=3600` {
		t.Fatalf("rate spent: got %d %q, want a rate 429", r.StatusCode, r.Header.Get("RateLimit-Policy"))
	}
	if sets := srv.DoList(t, "KEYS", "*}:c"); len(sets) != 0 {
		t.Errorf("lease sets in Redis after every response ended: got %q, want none (a slot is held)", sets)
	}
}

// The admin API shows a concurrency rule's leases for a key (in use, free,
// when the last expires) beside its rate, and a reset frees its slots at
// once.
func TestAdminShowsAndResetsLeases(t *testing.T) {
	up, upURL := newBlockingUpstream(t)
	g, _ := startGW(t, server.Options{AdminToken: []byte(token), Upstream: upURL, Limiter: httplimit.Options{Rules: []httplimit.Rule{{
		Name: "exports", Key: []httplimit.KeyPart{httplimit.Header("X-User")},
		Limit:       sluice.Limit{Algorithm: sluice.TokenBucket, Count: 10, Period: time.Hour, Burst: 10},
		Concurrency: &httplimit.ConcurrencyRule{Limit: 2, Lease: time.Minute},
	}}}})
	done := make(chan *http.Response, 4)
	for range 2 {
		go func() { done <- get(t, "GET", g.url+"/x", map[string]string{"X-User": "ann"}) }()
	}
	up.waitStarted(t, 2)
	if got := metric(t, g.admin, `sluice_leases_held{rule="exports"}`); got != "2" {
		t.Errorf("leases held with 2 in flight: got %q, want 2", got)
	}
	code, m, _ := call(t, "POST", g.admin+"/admin/v1/keys/show", `{"rule":"exports","key":["ann"]}`)
	if code != 200 {
		t.Fatalf("show: %d %v", code, m)
	}
	ls, _ := m["limits"].([]any)
	if len(ls) != 2 {
		t.Fatalf("show: got %v, want the rate and the slots", m)
	}
	if used, remaining, _ := state(t, m, 0); used != 2 || remaining != 8 {
		t.Errorf("rate: got used %v remaining %v, want 2, 8", used, remaining)
	}
	slots := ls[1].(map[string]any)
	c, _ := slots["concurrency"].(map[string]any)
	st, _ := slots["state"].(map[string]any)
	if c == nil || c["limit"] != 2.0 || c["lease"] != "1m0s" || st["used"] != 2.0 || st["remaining"] != 0.0 || st["allowed"] != false {
		t.Fatalf("slots: got %v, want limit 2, lease 1m, 2 in use, none free", slots)
	}
	if r := st["reset_after_seconds"].(float64); r <= 50 || r > 60 {
		t.Errorf("slots: last lease expires in %vs, want about 60", r)
	}
	if r := get(t, "GET", g.url+"/x", map[string]string{"X-User": "ann"}); r.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third in flight: got %d, want 429", r.StatusCode)
	}
	if code, m, _ := call(t, "POST", g.admin+"/admin/v1/keys/reset", `{"rule":"exports","key":["ann"]}`); code != 200 {
		t.Fatalf("reset: %d %v", code, m)
	}
	_, m, _ = call(t, "POST", g.admin+"/admin/v1/keys/show", `{"rule":"exports","key":["ann"]}`)
	if used, remaining, _ := state(t, m, 1); used != 0 || remaining != 2 {
		t.Errorf("slots after reset: got used %v remaining %v, want 0, 2", used, remaining)
	}
	go func() { done <- get(t, "GET", g.url+"/x", map[string]string{"X-User": "ann"}) }()
	up.waitStarted(t, 1) // served at once: its slots were freed
	for range 3 {
		up.release <- struct{}{}
		if r := <-done; r.StatusCode != http.StatusOK {
			t.Errorf("response: got %d, want 200", r.StatusCode)
		}
	}
	// The two leases reset under their requests were lost at release.
	want := map[string]string{
		`sluice_lease_acquisitions_total{outcome="granted",rule="exports"}`: "3",
		`sluice_lease_acquisitions_total{outcome="refused",rule="exports"}`: "1",
		`sluice_leases_lost_total{rule="exports"}`:                          "2",
		`sluice_leases_held{rule="exports"}`:                                "0",
	}
	waitMetrics(t, g.admin, want)
}

// waitMetrics waits until every series has its value: a slot is released
// just after its response is written.
func waitMetrics(t *testing.T, admin string, want map[string]string) {
	t.Helper()
	bad := ""
	eventually(t, func() bool {
		bad = ""
		for series, v := range want {
			if got := metric(t, admin, series); got != v {
				bad += fmt.Sprintf("%s: got %q, want %s; ", series, got, v)
			}
		}
		return bad == ""
	}, func() string { return bad })
}

// A delay rule's request waits for a slot; the wait is in
// sluice_lease_wait_seconds.
func TestLeaseWaitMetrics(t *testing.T) {
	srv := redistest.Start(t)
	up, upURL := newBlockingUpstream(t)
	g := start(t, server.Options{Upstream: upURL, Backend: "redis", Redis: redisstore.Options{URL: srv.URL(), Timeout: 5 * time.Second}, Limiter: httplimit.Options{Rules: []httplimit.Rule{{
		Name: "one", Key: []httplimit.KeyPart{httplimit.Global()}, Action: httplimit.Delay, MaxDelay: 10 * time.Second,
		Concurrency: &httplimit.ConcurrencyRule{Limit: 1, Lease: time.Minute},
	}}}})
	done := make(chan *http.Response, 2)
	go func() { done <- get(t, "GET", g.url+"/x", nil) }()
	up.waitStarted(t, 1)
	before := scriptCalls(t, srv)
	go func() { done <- get(t, "GET", g.url+"/x", nil) }()
	// The second waits for the slot: release the first once Redis has
	// refused it (a script call since).
	eventually(t, func() bool { return scriptCalls(t, srv) != before },
		func() string { return "the second request never asked for a slot" })
	up.release <- struct{}{}
	up.waitStarted(t, 1)
	up.release <- struct{}{}
	for range 2 {
		if r := <-done; r.StatusCode != http.StatusOK {
			t.Fatalf("got %d, want 200", r.StatusCode)
		}
	}
	waitMetrics(t, g.admin, map[string]string{
		`sluice_lease_acquisitions_total{outcome="granted",rule="one"}`: "2",
		`sluice_lease_wait_seconds_count{rule="one"}`:                   "1",
		`sluice_leases_held{rule="one"}`:                                "0",
		`sluice_leases_lost_total{rule="one"}`:                          "",
	})
}

// scriptCalls returns how many scripts srv has run.
func scriptCalls(t *testing.T, srv *redistest.Server) int {
	t.Helper()
	total := 0
	for _, line := range strings.Split(srv.Do(t, "INFO", "commandstats"), "\n") {
		for _, c := range []string{"evalsha", "eval"} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+c+":calls="); ok {
				n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
				total += n
			}
		}
	}
	return total
}
