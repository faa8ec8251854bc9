package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// rolloutRule limits each X-Key to 2 requests a minute, enforced on pct%
// of the keys.
func rolloutRule(pct float64) httplimit.Rule {
	return httplimit.Rule{
		Name:    "orders",
		Key:     []httplimit.KeyPart{httplimit.Header("X-Key")},
		Limit:   limit(sluice.FixedWindow, 2, time.Minute),
		Enforce: &sluice.Rollout{Percent: pct},
	}
}

// enforced says, from the rule's key for client k, whether a rollout of
// pct% enforces the rule on it.
func enforced(t *testing.T, lim *httplimit.Limiter, pct float64, k string) bool {
	t.Helper()
	key, err := lim.RuleKey("orders", []string{k})
	if err != nil {
		t.Fatal(err)
	}
	return (&sluice.Rollout{Percent: pct}).Enforces("orders", key)
}

// A rule enforced on 30% of its keys rejects exactly the keys its rollout
// picks; the others always pass, counted on the same counters and
// reported as shadow_limited once over the limit.
func TestEnforceOnAShareOfKeys(t *testing.T) {
	e := newEnv(t, httplimit.Options{Rules: []httplimit.Rule{rolloutRule(30)}})
	const n = 400
	nEnforced := 0
	for i := range n {
		k := fmt.Sprintf("client-%d", i)
		enf := enforced(t, e.lim, 30, k)
		q := req{target: "/orders", header: map[string]string{"X-Key": k}}
		got := strings.Join(intStrings(e.statuses(4, q)), ",")
		ev := e.obs.last(t).Rules[0]
		if enf {
			nEnforced++
			eq(t, k+" statuses (enforced)", got, "200,200,429,429")
			eq(t, k+" outcome", ev.Outcome, httplimit.OutcomeLimited)
			eq(t, k+" action", ev.Action, httplimit.Reject)
		} else {
			eq(t, k+" statuses (shadow)", got, "200,200,200,200")
			eq(t, k+" outcome", ev.Outcome, httplimit.OutcomeShadowLimited)
			eq(t, k+" action", ev.Action, httplimit.Shadow)
		}
		// The same counter either way: the two admitted requests, and
		// not the ones over the limit.
		key, _ := e.lim.RuleKey("orders", []string{k})
		st, err := e.lim.PeekKey(context.Background(), "orders", key, nil)
		if err != nil {
			t.Fatal(err)
		}
		eq(t, k+" remaining", st[0].Decision.Remaining, 0)
		eq(t, k+" shown as shadow", st[0].Shadow, !enf)
		if t.Failed() {
			return
		}
	}
	// 30% of 400 is 120, with a binomial standard deviation of 9.2.
	if math.Abs(float64(nEnforced)-120) > 5*math.Sqrt(n*0.3*0.7) {
		t.Errorf("%d of %d keys enforced, want 120 ± 46", nEnforced, n)
	}
}

// Rebuilding the limiter with a higher percentage on the same store (what
// a reload does) keeps every counter: a key newly enforced at 50% that
// used its quota in shadow mode at 10% is rejected at once, and a key
// enforced at 10% is still enforced.
func TestEnforceRaisedKeepsCounters(t *testing.T) {
	for name, mk := range countStores {
		t.Run(name, func(t *testing.T) { enforceRaisedKeepsCounters(t, mk(t)) })
	}
}

func enforceRaisedKeepsCounters(t *testing.T, store sluice.Store) {
	build := func(pct float64) *env {
		e := &env{t: t, obs: &recorder{}}
		lim, err := httplimit.New(httplimit.Options{Store: store, Observer: e.obs, Rules: []httplimit.Rule{rolloutRule(pct)}})
		if err != nil {
			t.Fatal(err)
		}
		e.lim = lim
		e.h = lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		return e
	}
	at10 := build(10)
	var newly, kept string
	for i := 0; newly == "" || kept == ""; i++ {
		k := fmt.Sprintf("client-%d", i)
		switch {
		case !enforced(t, at10.lim, 10, k) && enforced(t, at10.lim, 50, k) && newly == "":
			newly = k
		case enforced(t, at10.lim, 10, k) && kept == "":
			kept = k
		}
	}
	q := func(k string) req { return req{target: "/", header: map[string]string{"X-Key": k}} }
	eq(t, "newly enforced key at 10%", strings.Join(intStrings(at10.statuses(3, q(newly))), ","), "200,200,200")
	eq(t, "kept key at 10%", strings.Join(intStrings(at10.statuses(1, q(kept))), ","), "200")

	at50 := build(50)
	eq(t, "newly enforced key at 50%", at50.do(q(newly)).StatusCode, http.StatusTooManyRequests)
	eq(t, "kept key at 50%", strings.Join(intStrings(at50.statuses(2, q(kept))), ","), "200,429")
}

// A Count rule's keys in shadow mode are charged only for matching
// responses, as enforced keys are, in either count mode, and never
// refused.
func TestEnforceWithCount(t *testing.T) {
	for _, mode := range []httplimit.CountMode{httplimit.CountAfter, httplimit.CountReserve} {
		t.Run(mode.String(), func(t *testing.T) {
			store := memstore.New(memstore.Options{Clock: clock.NewFake(t0), SweepInterval: -1})
			t.Cleanup(func() { store.Close() })
			obs := &recorder{}
			lim, err := httplimit.New(httplimit.Options{Store: store, Observer: obs, Rules: []httplimit.Rule{{
				Name:    "login",
				Key:     []httplimit.KeyPart{httplimit.Header("X-Account")},
				Limit:   limit(sluice.GCRA, 3, time.Hour),
				Count:   &httplimit.CountOn{Statuses: []int{401}, Mode: mode},
				Enforce: &sluice.Rollout{Percent: 0},
			}}})
			if err != nil {
				t.Fatal(err)
			}
			var hits atomic.Int64
			h := lim.Handler(statusUpstream(&hits))
			send := func(want string) int {
				r, _ := http.NewRequest(http.MethodPost, "/login?want="+want, nil)
				r.Header.Set("X-Account", "ann")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w.Code
			}
			for range 5 { // successes are never counted
				eq(t, "success", send("200"), http.StatusOK)
			}
			key, _ := lim.RuleKey("login", []string{"ann"})
			st, _ := lim.PeekKey(context.Background(), "login", key, nil)
			eq(t, "remaining after successes", st[0].Decision.Remaining, 3)
			for i := range 3 {
				eq(t, fmt.Sprintf("failure %d", i), send("401"), http.StatusUnauthorized)
			}
			st, _ = lim.PeekKey(context.Background(), "login", key, nil)
			eq(t, "remaining after 3 failures", st[0].Decision.Remaining, 0)
			eq(t, "over the limit, still passed", send("401"), http.StatusUnauthorized)
			eq(t, "outcome over the limit", obs.last(t).Rules[0].Outcome, httplimit.OutcomeShadowLimited)
			eq(t, "requests that reached the upstream", hits.Load(), 9)
		})
	}
}

func TestEnforceValidation(t *testing.T) {
	base := limit(sluice.TokenBucket, 5, time.Second)
	for _, c := range []struct {
		name string
		rule httplimit.Rule
		want string
	}{
		{"above 100", httplimit.Rule{Name: "r", Limit: base, Enforce: &sluice.Rollout{Percent: 100.5}}, "want 0 to 100"},
		{"NaN", httplimit.Rule{Name: "r", Limit: base, Enforce: &sluice.Rollout{Percent: math.NaN()}}, "want 0 to 100"},
		{"delay", httplimit.Rule{Name: "r", Limit: base, Action: httplimit.Delay, MaxDelay: time.Second, Enforce: &sluice.Rollout{Percent: 5}}, "enforce is for action reject, not delay"},
		{"shadow", httplimit.Rule{Name: "r", Limit: base, Action: httplimit.Shadow, Enforce: &sluice.Rollout{Percent: 5}}, "enforce is for action reject, not shadow"},
		{"exempt", httplimit.Rule{Name: "r", Action: httplimit.Exempt, Enforce: &sluice.Rollout{Percent: 5}}, "an exempt rule takes no"},
		{"concurrency", httplimit.Rule{Name: "r", Concurrency: &httplimit.ConcurrencyRule{Limit: 2, Lease: time.Minute}, Enforce: &sluice.Rollout{Percent: 5}}, "not for concurrency rules"},
	} {
		err := c.rule.Validate()
		if !errors.Is(err, httplimit.ErrInvalidRule) || !strings.Contains(fmt.Sprint(err), c.want) {
			t.Errorf("%s: Validate() = %v, want an ErrInvalidRule saying %q", c.name, err, c.want)
		}
	}
	ok := httplimit.Rule{Name: "r", Limit: base, Enforce: &sluice.Rollout{Percent: 0.5}}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate(0.5%%) = %v", err)
	}
}

// The limiter keeps its own copy of a rule's Enforce: changing the
// caller's afterwards changes nothing.
func TestEnforceIsCopied(t *testing.T) {
	r := rolloutRule(100)
	e := newEnv(t, httplimit.Options{Rules: []httplimit.Rule{r}})
	r.Enforce.Percent = 0
	q := req{target: "/", header: map[string]string{"X-Key": "a"}}
	eq(t, "statuses", strings.Join(intStrings(e.statuses(3, q)), ","), "200,200,429")
}
