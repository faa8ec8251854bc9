package replay

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/httplimit"
)

// The known traffic: each client sends to one rule's paths, so that each
// request is decided by one rule, whose expected decisions a model of the
// algorithm's definition computes here, independently of package algo.

var t0 = time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)

type hit struct {
	at     time.Time
	client string
	method string
	target string
}

// knownTraffic is a steady client, a bursty one, a scraper, a boundary
// attack on a fixed and on a sliding window, and a client whose requests
// wait their turn, in time order.
func knownTraffic() []hit {
	var hs []hit
	add := func(at time.Duration, client, target string, n int) {
		for range n {
			hs = append(hs, hit{at: t0.Add(at), client: client, method: "GET", target: target})
		}
	}
	for s := range 600 { // steady: one a second
		add(time.Duration(s)*time.Second, "192.0.2.10", fmt.Sprintf("/api/items/%d", s), 1)
	}
	add(100*time.Second, "192.0.2.20", "/api/search?q=burst", 100) // bursty
	add(115*time.Second, "192.0.2.20", "/api/search?q=burst", 30)
	add(300*time.Second, "192.0.2.20", "/api/search?q=burst", 50)
	for s := range 300 { // scraper: five a second
		add(time.Duration(s)*time.Second, "192.0.2.30", fmt.Sprintf("/api/items/%d", s), 5)
	}
	for _, p := range []string{"/fw/login", "/sl/login"} { // across the boundary of a minute
		add(59*time.Second, "192.0.2.40", p, 10)
		add(60*time.Second, "192.0.2.40", p, 10)
		add(119*time.Second, "192.0.2.40", p, 10)
	}
	add(200*time.Second, "192.0.2.50", "/export/a", 5) // delayed, then refused
	slices.SortStableFunc(hs, func(a, b hit) int { return a.at.Compare(b.at) })
	return hs
}

// expected is a rule's outcome per client.
type expected struct {
	admitted, limited, delayed map[string]int64
	maxDelay                   time.Duration
}

// model decides each hit by the definitions of the algorithms of
// testdata/known.yaml, and returns each rule's outcomes per client and
// whether each hit is admitted.
func model(hs []hit) (map[string]*expected, []bool) {
	var each []bool
	out := map[string]*expected{}
	for _, r := range []string{"api", "fw", "sl", "export"} {
		out[r] = &expected{admitted: map[string]int64{}, limited: map[string]int64{}, delayed: map[string]int64{}}
	}
	// token_bucket 20 per 10s, burst 40: a token every 500ms, at most 40
	// held, a fresh client's bucket full; credit is kept in ns of refill.
	const tokenNs, burst = int64(500 * time.Millisecond), 40
	credit, last := map[string]int64{}, map[string]int64{}
	// fixed_window 10 per minute, windows aligned to the epoch.
	windows := map[string]int64{}
	// sliding_log 10 per minute: never more than 10 in (t−1m, t].
	logs := map[string][]int64{}
	// gcra 1/s, burst 1, delay up to 3s: a request's turn is the
	// theoretical arrival time; it waits until then, or is refused (and
	// not charged) if that is more than 3s away.
	tat := map[string]int64{}
	for _, h := range hs {
		t := h.at.UnixNano()
		var rule string
		admit := false
		switch {
		case strings.HasPrefix(h.target, "/api/"):
			rule = "api"
			c, seen := credit[h.client]
			if !seen {
				c = burst * tokenNs
			} else {
				c = min(burst*tokenNs, c+(t-last[h.client]))
			}
			last[h.client] = t
			if admit = c >= tokenNs; admit {
				c -= tokenNs
			}
			credit[h.client] = c
		case strings.HasPrefix(h.target, "/fw/"):
			rule = "fw"
			k := fmt.Sprintf("%s|%d", h.client, t/int64(time.Minute))
			if admit = windows[k] < 10; admit {
				windows[k]++
			}
		case strings.HasPrefix(h.target, "/sl/"):
			rule = "sl"
			n := 0
			for _, at := range logs[h.client] {
				if at > t-int64(time.Minute) {
					n++
				}
			}
			if admit = n < 10; admit {
				logs[h.client] = append(logs[h.client], t)
			}
		case strings.HasPrefix(h.target, "/export/"):
			rule = "export"
			turn := max(tat[h.client], t)
			wait := time.Duration(turn - t)
			if admit = wait <= 3*time.Second; admit {
				tat[h.client] = turn + int64(time.Second)
				if wait > 0 {
					out[rule].delayed[h.client]++
					out[rule].maxDelay = max(out[rule].maxDelay, wait)
				}
			}
		}
		if admit {
			out[rule].admitted[h.client]++
		} else {
			out[rule].limited[h.client]++
		}
		each = append(each, admit)
	}
	return out, each
}

// writeLog writes the hits in a format, each with a status of 200 and the
// user agent "test".
func writeLog(t *testing.T, f Format, hs []hit) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, h := range hs {
		switch f {
		case Combined:
			fmt.Fprintf(&b, "%s - - [%s] \"%s %s HTTP/1.1\" 200 12 \"-\" \"test\"\n", h.client, h.at.Format("02/Jan/2006:15:04:05 -0700"), h.method, h.target)
		case JSON:
			fmt.Fprintf(&b, `{"time":%q,"remote_addr":%q,"request_method":%q,"request_uri":%q,"status":200,"http_user_agent":"test","nested":{"a":[1,{"b":"}"}]}}`+"\n",
				h.at.Format(time.RFC3339Nano), h.client, h.method, h.target)
		case Envoy:
			fmt.Fprintf(&b, "[%s] \"%s %s HTTP/1.1\" 200 - 0 12 3 2 \"%s\" \"test\" \"id-1\" \"api.example.com\" \"10.0.0.1:80\"\n",
				h.at.Format("2006-01-02T15:04:05.000Z"), h.method, h.target, h.client)
		case Caddy:
			fmt.Fprintf(&b, `{"level":"info","ts":%d.%09d,"logger":"http.log.access.log0","msg":"handled request","request":{"remote_ip":%q,"remote_port":"51000","proto":"HTTP/1.1","method":%q,"host":"api.example.com","uri":%q,"headers":{"User-Agent":["test"],"Accept":["*/*"]}},"duration":0.001,"size":12,"status":200}`+"\n",
				h.at.Unix(), h.at.Nanosecond(), h.client, h.method, h.target)
		case Istio:
			fmt.Fprintf(&b, "[%s] \"%s %s HTTP/1.1\" 200 - via_upstream - \"-\" 0 12 3 2 \"%s\" \"test\" \"id-1\" \"api.example.com\" \"10.0.0.1:80\" inbound|80|| 127.0.0.6:41000 10.0.0.1:80 %s:51000 outbound_.80_._.api default\n",
				h.at.Format("2006-01-02T15:04:05.000Z"), h.method, h.target, h.client, h.client)
		}
	}
	return b.Bytes()
}

// TestKnownTraffic replays the known traffic in each format and holds each
// rule's counts, clients and most limited clients to the model.
func TestKnownTraffic(t *testing.T) {
	hs := knownTraffic()
	want, each := model(hs)
	// The model itself shows the behaviour the traffic is made for.
	for _, c := range []struct {
		rule, client      string
		admitted, limited int64
	}{
		{"api", "192.0.2.10", 600, 0}, // the steady client is never limited
		{"fw", "192.0.2.40", 20, 10},  // 20 through in the 1s across 12:01, none at 12:01:59
		{"sl", "192.0.2.40", 20, 10},  // 10 through across 12:01, 10 at 12:01:59
		{"export", "192.0.2.50", 4, 1},
	} {
		if a, l := want[c.rule].admitted[c.client], want[c.rule].limited[c.client]; a != c.admitted || l != c.limited {
			t.Fatalf("model: %s %s: admitted %d, limited %d; want %d, %d", c.rule, c.client, a, l, c.admitted, c.limited)
		}
	}
	if want["api"].limited["192.0.2.20"] == 0 || want["api"].limited["192.0.2.30"] == 0 {
		t.Fatal("model: the bursty client and the scraper are never limited")
	}
	boundary := func(target string, at time.Duration) (n int) {
		for i, h := range hs {
			if h.target == target && h.at.Equal(t0.Add(at)) && each[i] {
				n++
			}
		}
		return n
	}
	if a, b := boundary("/fw/login", 59*time.Second)+boundary("/fw/login", 60*time.Second), boundary("/sl/login", 59*time.Second)+boundary("/sl/login", 60*time.Second); a != 20 || b != 10 {
		t.Fatalf("model: across the minute's boundary the fixed window admits %d and the sliding log %d; want 20 and 10", a, b)
	}
	cfg := loadTestConfig(t, "testdata/known.yaml")
	for _, f := range []Format{Combined, JSON, Envoy, Istio, Caddy} {
		t.Run(f.String(), func(t *testing.T) {
			var outcomes []httplimit.Outcome
			var delays []time.Duration
			r, err := newRun(Options{Config: cfg, Logs: []string{"-"}, Stdin: bytes.NewReader(writeLog(t, f, hs)), Format: f, Top: 100})
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
			if rep.Lines != int64(len(hs)) || rep.Requests != int64(len(hs)) || rep.Unparsed != 0 || rep.Late != 0 {
				t.Fatalf("lines %d, requests %d, unparsed %d (%v), late %d; want %d, %d, 0, 0", rep.Lines, rep.Requests, rep.Unparsed, rep.UnparsedLines, rep.Late, len(hs), len(hs))
			}
			for _, rr := range rep.Rules {
				w := want[rr.Rule]
				var admitted, limited, delayed, clientsLimited int64
				clients := map[string]bool{}
				for c, n := range w.admitted {
					admitted += n
					clients[c] = true
				}
				for c, n := range w.limited {
					limited += n
					clients[c] = true
					clientsLimited++
				}
				for _, n := range w.delayed {
					delayed += n
				}
				if rr.Admitted != admitted || rr.Limited != limited || rr.Delayed != delayed || rr.Matched != admitted+limited || rr.Skipped != 0 {
					t.Errorf("%s: matched %d, admitted %d, limited %d, delayed %d, skipped %d; want %d, %d, %d, %d, 0",
						rr.Rule, rr.Matched, rr.Admitted, rr.Limited, rr.Delayed, rr.Skipped, admitted+limited, admitted, limited, delayed)
				}
				if rr.Clients != int64(len(clients)) || rr.ClientsLimited != clientsLimited {
					t.Errorf("%s: clients %d, limited %d; want %d, %d", rr.Rule, rr.Clients, rr.ClientsLimited, len(clients), clientsLimited)
				}
				if got := time.Duration(rr.MaxDelaySeconds * float64(time.Second)); got != w.maxDelay {
					t.Errorf("%s: max delay %v, want %v", rr.Rule, got, w.maxDelay)
				}
				var top []string
				for _, c := range rr.Top {
					top = append(top, fmt.Sprintf("%s:%d", c.Key, c.Limited))
				}
				var wantTop []string
				for c, n := range w.limited {
					wantTop = append(wantTop, fmt.Sprintf("ip=%s/32:%d", c, n))
				}
				slices.Sort(top)
				slices.Sort(wantTop)
				if !slices.Equal(top, wantTop) {
					t.Errorf("%s: top %q, want %q", rr.Rule, top, wantTop)
				}
			}
			var perMinute int64
			for _, rr := range rep.Rules {
				for _, m := range rr.PerMinute {
					perMinute += m.Limited
				}
				if rr.Rule == "sl" && len(rr.PerMinute) != 2 {
					t.Errorf("sl: %d minutes with requests, want 2 (12:00 and 12:01)", len(rr.PerMinute))
				}
			}
			if perMinute != rep.Limited+0 || rep.Limited == 0 {
				t.Errorf("the minutes count %d limited requests, the report %d", perMinute, rep.Limited)
			}
			if len(outcomes) != len(hs) {
				t.Fatalf("%d outcomes for %d requests", len(outcomes), len(hs))
			}
			for i, o := range outcomes {
				if admitted := o != httplimit.OutcomeLimited; admitted != each[i] {
					t.Errorf("request %d (%s %s at %s): outcome %v, want admitted %v", i, hs[i].client, hs[i].target, hs[i].at.Format(time.TimeOnly), o, each[i])
				}
			}
		})
	}
}
