package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

// TestWaitOptionDecidesDelaysWithoutWallTime: with Options.Wait, a Delay
// rule's request waits through the hook alone, which is asked for exactly
// the delay the store reserved; an error from it cancels the request and
// gives its turn back.
func TestWaitOptionDecidesDelaysWithoutWallTime(t *testing.T) {
	var asked []time.Duration
	var fail bool
	rule := httplimit.Rule{Name: "export", Action: httplimit.Delay, MaxDelay: 5 * time.Second,
		Limit: sluice.Limit{Algorithm: sluice.GCRA, Count: 1, Period: time.Second, Burst: 1}}
	e := newEnv(t, httplimit.Options{Rules: []httplimit.Rule{rule}, Wait: func(ctx context.Context, d time.Duration) error {
		asked = append(asked, d)
		if fail {
			return context.Canceled
		}
		return nil
	}})
	for i, want := range []time.Duration{0, time.Second, 2 * time.Second} {
		if got := e.do(req{target: "/x", remote: "192.0.2.1:1"}).StatusCode; got != http.StatusOK {
			t.Fatalf("request %d: got status %d, want 200", i, got)
		}
		ev := e.obs.last(t)
		eq(t, "delay", ev.Delay, want)
		if want > 0 {
			eq(t, "outcome", ev.Outcome, httplimit.OutcomeDelayed)
		}
	}
	if len(asked) != 2 || asked[0] != time.Second || asked[1] != 2*time.Second {
		t.Fatalf("Wait asked for %v, want [1s 2s]", asked)
	}
	// A wait that fails cancels the request, and its turn is given back:
	// the next request is offered the same delay.
	fail = true
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, httptest.NewRequest("GET", "/x", nil))
	eq(t, "canceled outcome", e.obs.last(t).Outcome, httplimit.OutcomeCanceled)
	fail = false
	e.do(req{target: "/x"})
	eq(t, "delay after a canceled turn", asked[len(asked)-1], 3*time.Second)
}

// stepClock moves by step at every reading.
type stepClock struct {
	t    time.Time
	step time.Duration
}

func (c *stepClock) Now() time.Time { c.t = c.t.Add(c.step); return c.t }

// TestClockOptionMeasuresLatency: Event.Latency is measured on
// Options.Clock, not the wall clock.
func TestClockOptionMeasuresLatency(t *testing.T) {
	rule := httplimit.Rule{Name: "r", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Count: 10, Period: time.Second}}
	e := newEnv(t, httplimit.Options{Rules: []httplimit.Rule{rule}, Clock: &stepClock{t: t0, step: 5 * time.Millisecond}})
	e.do(req{target: "/x"})
	eq(t, "latency", e.obs.last(t).Latency, 5*time.Millisecond)
}
