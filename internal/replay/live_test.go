package replay

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/server"
)

// liveTraffic is three minutes of six clients, each at 127.0.1.N so that
// the live gateway sees them at their own addresses, sending a few
// requests a second at millisecond times to every rule of
// testdata/live.yaml.
func liveTraffic() []hit {
	x := uint64(88172645463325252)
	rnd := func(n int) int { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return int(x % uint64(n)) }
	targets := []string{"/api/items/1", "/api/search?q=a", "/login", "/export/report", "/healthz", "/static/app.js"}
	var hs []hit
	for s := range 180 {
		for c := 1; c <= 6; c++ {
			// Client 1 is heavy; the others come and go.
			n := rnd(3)
			if c == 1 {
				n = 4 + rnd(6)
			}
			for range n {
				target := targets[rnd(len(targets))]
				method := "GET"
				if target == "/login" {
					method = "POST"
				}
				at := t0.Add(time.Duration(s)*time.Second + time.Duration(rnd(1000))*time.Millisecond)
				hs = append(hs, hit{at: at, client: fmt.Sprintf("127.0.1.%d", c), method: method, target: target})
			}
		}
	}
	slices.SortStableFunc(hs, func(a, b hit) int { return a.at.Compare(b.at) })
	return hs
}

// TestReplayMatchesTheLiveGateway sends the same requests, in the same
// order, at the same times (on a fake clock), through the gateway of
// package server over real HTTP from the clients' own loopback addresses,
// and holds replay's decision of each to the gateway's answer.
func TestReplayMatchesTheLiveGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("sends a few thousand requests over loopback")
	}
	hs := liveTraffic()
	cfg := loadTestConfig(t, "testdata/live.yaml")

	// Replay.
	var outcomes []httplimit.Outcome
	var delays []time.Duration
	r, err := newRun(Options{Config: cfg, Logs: []string{"-"}, Stdin: bytes.NewReader(writeLog(t, JSON, hs)), Format: JSON})
	if err != nil {
		t.Fatal(err)
	}
	r.decided = func(_ *entry, o httplimit.Outcome, d time.Duration) {
		outcomes = append(outcomes, o)
		delays = append(delays, d)
	}
	rep, err := r.do(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(outcomes) != len(hs) {
		t.Fatalf("replay decided %d of %d requests", len(outcomes), len(hs))
	}

	// Live.
	lo, err := cfg.LimiterOptions()
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(hs[0].at)
	srv, err := server.New(server.Options{Upstream: server.EchoUpstream, Limiter: lo, Clock: clk,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	clients := map[string]*http.Client{}
	client := func(addr string) *http.Client {
		if c := clients[addr]; c != nil {
			return c
		}
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(addr)}}
		tr := &http.Transport{DialContext: d.DialContext}
		t.Cleanup(tr.CloseIdleConnections)
		c := &http.Client{Transport: tr}
		clients[addr] = c
		return c
	}
	var limited, delayed int
	for i, h := range hs {
		clk.Set(h.at)
		req, err := http.NewRequest(h.method, ts.URL+h.target, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("User-Agent", "test")
		start := time.Now()
		resp, err := client(h.client).Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		o := outcomes[i]
		want := http.StatusOK
		if o == httplimit.OutcomeLimited {
			want = http.StatusTooManyRequests
			limited++
		}
		if resp.StatusCode != want {
			t.Errorf("request %d (%s %s %s at %s): the gateway answered %d; replay decided %v", i, h.client, h.method, h.target,
				h.at.Format("15:04:05.000"), resp.StatusCode, o)
		}
		if o == httplimit.OutcomeDelayed {
			delayed++
			// The gateway waits on the wall clock, so it cannot have
			// answered sooner than the delay replay found.
			if took < delays[i] || delays[i] <= 0 {
				t.Errorf("request %d: replay delayed it by %v; the gateway answered in %v", i, delays[i], took)
			}
		}
	}
	if limited == 0 || delayed == 0 || rep.Rules[3].Limited == 0 {
		t.Errorf("the traffic tests too little: %d limited, %d delayed, %d shadow-limited", limited, delayed, rep.Rules[3].Limited)
	}
	t.Logf("%d requests: %d limited, %d delayed, the same live and in replay", len(hs), limited, delayed)
}
