package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// topAnswer is GET /admin/v1/top?rule=NAME's answer, decoded strictly.
type topAnswer struct {
	Rule    string `json:"rule"`
	By      string `json:"by"`
	Window  int    `json:"window"`
	Entries []struct {
		Key      string `json:"key"`
		Requests uint64 `json:"requests"`
		Limited  uint64 `json:"limited"`
		Error    uint64 `json:"error"`
	} `json:"entries"`
}

// getTop fetches the admin API's top with query q and decodes it, failing
// on any field the documented shape does not have.
func getTop(t *testing.T, admin, q string) topAnswer {
	t.Helper()
	resp := get(t, "GET", admin+"/admin/v1/top?"+q, map[string]string{"Authorization": "Bearer " + token})
	if resp.StatusCode != 200 {
		t.Fatalf("GET /admin/v1/top?%s: %d", q, resp.StatusCode)
	}
	dec := json.NewDecoder(resp.Body)
	dec.DisallowUnknownFields()
	var a topAnswer
	if err := dec.Decode(&a); err != nil {
		t.Fatalf("GET /admin/v1/top?%s: %v", q, err)
	}
	return a
}

// hammer sends the quiet clients one request each on /api and the loud one
// n, and returns how many of the loud one's were refused.
func hammer(t *testing.T, gw, loud string, n int, quiet ...string) int {
	t.Helper()
	for _, q := range quiet {
		get(t, "GET", gw+"/api", map[string]string{"X-API-Key": q})
	}
	return n - allowed(t, gw+"/api", loud, n)
}

// A client hammering past its limit among quiet ones comes first in the
// admin API's top, by refusals and by requests, with exact counts (fewer
// keys than counters), in the documented shape.
func TestTopShowsTheClientOverItsLimit(t *testing.T) {
	r, _ := startGW(t, adminOptions())
	refused := hammer(t, r.url, "k-loud", 30, "k-a", "k-b", "k-c", "k-d", "k-e")
	if refused != 28 {
		t.Fatalf("the loud client had %d refusals, want 28 (limit 2)", refused)
	}
	tests := []struct {
		q           string
		by          string
		wantEntries int
	}{
		{"rule=api", "limited", 1},
		{"rule=api&by=limited&n=3", "limited", 1},
		{"rule=api&by=requests&n=3", "requests", 3},
		{"rule=api&by=requests&window=3600", "requests", 6},
	}
	for _, tt := range tests {
		a := getTop(t, r.admin, tt.q)
		if a.Rule != "api" || a.By != tt.by || len(a.Entries) != tt.wantEntries {
			t.Errorf("%s: got rule %q by %q with %d entries, want api, %s, %d: %+v", tt.q, a.Rule, a.By, len(a.Entries), tt.by, tt.wantEntries, a)
			continue
		}
		want := 60
		if strings.Contains(tt.q, "3600") {
			want = 3600
		}
		if a.Window != want {
			t.Errorf("%s: window %d, want %d", tt.q, a.Window, want)
		}
		if e := a.Entries[0]; e.Key != "k-loud" || e.Requests != 30 || e.Limited != 28 || e.Error != 0 {
			t.Errorf("%s: first entry %+v, want k-loud with 30 requests, 28 limited, error 0", tt.q, e)
		}
		for _, e := range a.Entries[1:] {
			if e.Requests != 1 || e.Limited != 0 {
				t.Errorf("%s: quiet client %+v, want 1 request, 0 limited", tt.q, e)
			}
		}
	}

	// Without rule, every rule in force, in the configuration's order.
	resp := get(t, "GET", r.admin+"/admin/v1/top?by=requests", map[string]string{"Authorization": "Bearer " + token})
	var all struct{ Rules []topAnswer }
	if err := json.NewDecoder(resp.Body).Decode(&all); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range all.Rules {
		names = append(names, a.Rule)
	}
	if got := fmt.Sprint(names); got != "[health login api]" {
		t.Errorf("every rule: got %s, want [health login api]", got)
	}
}

// The top needs the admin token, names a rule that exists, and refuses a
// bad query with a problem document.
func TestTopRefusals(t *testing.T) {
	r, _ := startGW(t, adminOptions())
	tests := []struct {
		name, q, tok string
		code         int
		detail       string
	}{
		{"no token", "rule=api", "", 401, "bearer token is required"},
		{"wrong token", "rule=api", "not-the-token-at-all", 401, "bearer token is required"},
		{"no token, every rule", "", "", 401, "bearer token is required"},
		{"unknown rule", "rule=nope", token, 404, `no rule "nope": the rules in force are "health", "login", "api"`},
		{"bad by", "rule=api&by=allowed", token, 400, "by \"allowed\": want limited or requests"},
		{"bad n", "rule=api&n=0", token, 400, "n \"0\": want a whole number from 1 to 64"},
		{"bad window", "rule=api&window=5", token, 400, "window \"5\""},
	}
	for _, tt := range tests {
		code, m, h := callWith(t, "GET", r.admin+"/admin/v1/top?"+tt.q, "", tt.tok)
		detail, _ := m["detail"].(string)
		if code != tt.code || h.Get("Content-Type") != "application/problem+json" || !strings.Contains(detail, tt.detail) {
			t.Errorf("%s: got %d %s %q, want %d application/problem+json with %q", tt.name, code, h.Get("Content-Type"), detail, tt.code, tt.detail)
		}
		if _, leaked := m["entries"]; leaked {
			t.Errorf("%s: the answer holds entries", tt.name)
		}
	}
}

// The rate-limit service's descriptors have heavy hitters of their own,
// by descriptor name, and the overview lists them under their domain.
func TestTopOfTheServiceDescriptors(t *testing.T) {
	r, g := startGW(t, serviceOptions(t))
	ask := rlsClient(t, g)
	for range 10 {
		ask("client", "loud", 1)
	}
	ask("client", "quiet", 1)
	a := getTop(t, r.admin, "rule=api.client&by=limited")
	if len(a.Entries) != 1 || !strings.Contains(a.Entries[0].Key, "loud") || a.Entries[0].Limited != 7 || a.Entries[0].Requests != 10 {
		t.Fatalf("got %+v, want the loud client alone with 10 requests, 7 limited", a)
	}
	code, m, _ := call(t, "GET", r.admin+"/admin/v1/overview", "")
	if code != 200 {
		t.Fatalf("overview: %d %v", code, m)
	}
	b, _ := json.Marshal(m["domains"])
	if got, want := string(b), `[{"descriptors":["api.client"],"name":"api"}]`; got != want {
		t.Errorf("overview domains: got %s, want %s", got, want)
	}
}

// With store.redis.hash_keys the top shows the digests Redis holds, not
// the keys, unless admin.show_keys says otherwise.
func TestTopHashedKeys(t *testing.T) {
	srv := redistest.Start(t)
	for _, show := range []bool{false, true} {
		t.Run(fmt.Sprintf("show_keys=%v", show), func(t *testing.T) {
			o := adminOptions()
			o.Backend = "redis"
			o.Redis = redisstore.Options{URL: srv.URL(), Timeout: 5 * time.Second, HashKeys: true, HashSecret: []byte("s3cret"), Prefix: fmt.Sprintf("show%v", show)}
			o.AdminShowKeys = show
			r, g := startGW(t, o)
			hammer(t, r.url, "k-loud", 5)
			a := getTop(t, r.admin, "rule=api")
			if len(a.Entries) != 1 {
				t.Fatalf("got %+v, want one entry", a)
			}
			key, err := g.Limiter().RuleKey("api", []string{"k-loud"})
			if err != nil {
				t.Fatal(err)
			}
			want := g.Store().(*redisstore.Store).KeyDigest(key)
			if show {
				want = "k-loud"
			}
			if a.Entries[0].Key != want {
				t.Errorf("key %q, want %q", a.Entries[0].Key, want)
			}
			// The digest shown is the one in Redis's key names, so that an
			// operator can match the two.
			if !show && !slices.ContainsFunc(srv.DoList(t, "KEYS", "*"), func(k string) bool { return strings.Contains(k, want) }) {
				t.Errorf("no Redis key holds the digest %q shown", want)
			}
		})
	}
}

// The overview gives each rule's decisions a second by outcome and its
// top refused client.
func TestOverview(t *testing.T) {
	r, _ := startGW(t, adminOptions())
	hammer(t, r.url, "k-loud", 6, "k-a")
	code, m, _ := call(t, "GET", r.admin+"/admin/v1/overview?seconds=30", "")
	if code != http.StatusOK {
		t.Fatalf("overview: %d %v", code, m)
	}
	if h, _ := m["health"].(map[string]any); h["backend"] != "memory" || h["degraded"] != false {
		t.Errorf("health %v, want the memory backend, not degraded", h)
	}
	for _, x := range m["rules"].([]any) {
		rule := x.(map[string]any)
		if rule["name"] != "api" {
			continue
		}
		sum := func(f string) (n float64) {
			s := rule[f].([]any)
			if len(s) != 30 {
				t.Errorf("%s: %d seconds, want 30", f, len(s))
			}
			for _, v := range s {
				n += v.(float64)
			}
			return n
		}
		if a, l := sum("allowed"), sum("limited"); a != 3 || l != 4 {
			t.Errorf("api: %v allowed, %v limited, want 3 and 4", a, l)
		}
		top := rule["top"].(map[string]any)["entries"].([]any)
		if len(top) != 1 || top[0].(map[string]any)["key"] != "k-loud" {
			t.Errorf("api's top: %v, want k-loud", top)
		}
		return
	}
	t.Errorf("no rule api in %v", m["rules"])
}
