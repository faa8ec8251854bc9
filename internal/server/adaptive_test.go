package server_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/server"
)

// adaptiveOptions is a gateway to upstream whose adaptive rule's limit is
// pinned at one slot, which default requests may fill.
func adaptiveOptions(t *testing.T, upstream string, retry time.Duration) server.Options {
	t.Helper()
	lim, err := adaptive.New(adaptive.Options{MinLimit: 1, MaxLimit: 1, InitialLimit: 1, Shares: adaptive.Shares{Default: 1}, RetryAfter: retry})
	if err != nil {
		t.Fatal(err)
	}
	return server.Options{Upstream: upstream, Limiter: httplimit.Options{
		Rules:    []httplimit.Rule{{Name: "upstream", Concurrency: &httplimit.ConcurrencyRule{Adaptive: lim}}},
		Priority: httplimit.Priority{From: httplimit.Header("X-Priority")},
	}}
}

// A shed request is answered 503 with Retry-After and the
// temporary-reduced-capacity problem, counted in the adaptive metrics and
// logged; the limit, requests in flight and probes are on /metrics; and a
// reload keeps the running limiter's state: the slot held under the old
// configuration still counts under the new one, whose options apply.
func TestAdaptiveRuleShedsAndReloads(t *testing.T) {
	up, upURL := newBlockingUpstream(t)
	r, g := launch(t, adaptiveOptions(t, upURL, time.Second), slog.LevelInfo)
	held := make(chan *http.Response, 2)
	go func() { held <- get(t, "GET", r.url+"/a", nil) }()
	up.waitStarted(t, 1)

	resp := get(t, "GET", r.url+"/b", map[string]string{"X-Priority": "sheddable"})
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var p struct{ Type string }
	json.Unmarshal(body, &p)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || p.Type != httplimit.ProblemTypeUnavailable {
		t.Fatalf("shed: %d, Retry-After %q, %s; want 503, 1, temporary-reduced-capacity", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	for name, want := range map[string]string{
		`sluice_adaptive_limit{rule="upstream"}`:                                             "1",
		`sluice_adaptive_in_flight{rule="upstream"}`:                                         "1",
		`sluice_adaptive_queued{rule="upstream"}`:                                            "0",
		`sluice_adaptive_probes_total{rule="upstream"}`:                                      "1",
		`sluice_adaptive_requests_total{class="default",outcome="admitted",rule="upstream"}`: "1",
		`sluice_adaptive_requests_total{class="sheddable",outcome="shed",rule="upstream"}`:   "1",
		`sluice_adaptive_shed_total{class="sheddable",reason="limit",rule="upstream"}`:       "1",
		`sluice_adaptive_queue_seconds_count{class="sheddable",rule="upstream"}`:             "1",
		`sluice_decisions_total{outcome="shed",rule="upstream"}`:                             "1",
		`sluice_requests_total{outcome="shed"}`:                                              "1",
	} {
		if got := scrape(t, r.admin, name); got != want {
			t.Errorf("%s = %q, want %s", name, got, want)
		}
	}
	if !r.logs.contains(`"msg":"request shed to protect the upstream (503)","rule":"upstream","class":"sheddable","reason":"limit"`) {
		t.Errorf("no log line for the shed request: %s", r.logs.String())
	}

	if err := g.Reload(func() (server.Options, error) { return adaptiveOptions(t, upURL, 3*time.Second), nil }); err != nil {
		t.Fatal(err)
	}
	// A fresh limiter would have a free slot; the one kept does not, and
	// sheds with the new configuration's Retry-After.
	resp = get(t, "GET", r.url+"/c", nil)
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "3" {
		t.Fatalf("after the reload, with the slot held: %d, Retry-After %q; want 503, 3", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	up.release <- struct{}{}
	if resp := <-held; resp.StatusCode != 200 {
		t.Fatalf("held request: %d, want 200", resp.StatusCode)
	}
	go func() { held <- get(t, "GET", r.url+"/d", nil) }()
	up.waitStarted(t, 1)
	if got := scrape(t, r.admin, `sluice_adaptive_in_flight{rule="upstream"}`); got != "1" {
		t.Errorf("in flight after the reload: %s, want 1", got)
	}
	up.release <- struct{}{}
	if resp := <-held; resp.StatusCode != 200 {
		t.Fatalf("request after the slot came back: %d, want 200", resp.StatusCode)
	}
}

func (b *syncBuffer) contains(s string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Contains(b.b.String(), s)
}
