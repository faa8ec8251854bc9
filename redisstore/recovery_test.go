package redisstore_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// transitions records the calls of Options.OnStateChange.
type transitions struct {
	mu    sync.Mutex
	calls []string
}

func (tr *transitions) record(degraded bool, err error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.calls = append(tr.calls, fmt.Sprintf("%v (error set: %v)", degraded, err != nil))
}

func (tr *transitions) list() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.calls...)
}

// However long Redis has been away, decisions go back to it within about a
// second of its return: the breaker probes every second or so (±25%)
// throughout an outage, never backing off. Two minutes of an outage pass on
// the breaker's (fake) clock, with a decision every 1.3s; once Redis is
// back, 1.25s on that clock is enough for decisions to come from Redis
// again. (A breaker that doubled its cooldown, up to 30s, stays open.)
// OnStateChange hears of the outage once, with its error, and of the
// recovery once.
func TestRecoveryAfterLongOutage(t *testing.T) {
	srv := redistest.Start(t)
	fake := clock.NewFake(epoch)
	var tr transitions
	store := open(t, redisstore.Options{
		URL: srv.URL(), Timeout: slow, BreakerThreshold: 3,
		// One connection, in use throughout the outage: none sits idle
		// through the restart to fail once with EOF afterwards.
		Connections:   1,
		OnStateChange: tr.record,
	})
	redisstore.SetBreakerClock(store, fake.Now)
	lim := limiter(t, store, "recovery", sluice.Limit{Algorithm: sluice.GCRA, Count: 1000, Period: time.Hour})
	if d := allow(t, lim, "k"); d.Degraded {
		t.Fatalf("with Redis up: got a degraded decision")
	}

	srv.Stop()
	for range 3 {
		allow(t, lim, "k")
	}
	if !store.Degraded() {
		t.Fatalf("after 3 failures (threshold 3): Degraded() = false, want true")
	}
	for elapsed := time.Duration(0); elapsed < 2*time.Minute; elapsed += 1300 * time.Millisecond {
		fake.Advance(1300 * time.Millisecond)
		if d := allow(t, lim, "k"); !d.Degraded {
			t.Fatalf("Redis down for %v: got a decision from Redis", elapsed)
		}
	}
	// Let a probe still in flight finish (Redis is down: it fails at once),
	// so that no probe started during the outage sees Redis back.
	eventually(t, 5*time.Second, func() bool { return !redisstore.Probing(store) },
		func() string { return "a probe of the stopped Redis is still in flight" })

	srv.Restart(t)
	fake.Advance(1250 * time.Millisecond)
	eventually(t, 5*time.Second, func() bool { return !allow(t, lim, "k").Degraded },
		func() string {
			return fmt.Sprintf("Redis back for 1.25s on the breaker's clock after a 2-minute outage: decisions still degraded (Degraded() = %v)", store.Degraded())
		})
	if store.Degraded() {
		t.Errorf("after recovery: Degraded() = true, want false")
	}
	want := []string{"true (error set: true)", "false (error set: false)"}
	if got := tr.list(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("OnStateChange calls: got %v, want %v", got, want)
	}
}

// With no decisions at all, Degraded (which a metrics scrape polls) starts
// the probes itself, so it turns false within about a second of Redis's
// return.
func TestDegradedProbesWithoutTraffic(t *testing.T) {
	srv := redistest.Start(t)
	fake := clock.NewFake(epoch)
	store := open(t, redisstore.Options{URL: srv.URL(), Timeout: slow, BreakerThreshold: 1, Connections: 1})
	redisstore.SetBreakerClock(store, fake.Now)
	lim := limiter(t, store, "idle", hourly)
	allow(t, lim, "k")
	srv.Stop()
	if d := allow(t, lim, "k"); !d.Degraded || !store.Degraded() {
		t.Fatalf("Redis down: decision Degraded=%v, Degraded()=%v, want both true", d.Degraded, store.Degraded())
	}
	if d := allow(t, lim, "k"); !d.Degraded || !store.Degraded() {
		t.Fatalf("Redis down: decision 2 Degraded=%v, Degraded()=%v, want both true", d.Degraded, store.Degraded())
	}
	srv.Restart(t)
	if !store.Degraded() {
		t.Fatalf("before a probe is due: Degraded() = false, want true")
	}
	fake.Advance(1250 * time.Millisecond)
	eventually(t, 5*time.Second, func() bool { return !store.Degraded() },
		func() string { return "Redis back and a probe due: Degraded() still true" })
	if d := allow(t, lim, "k"); d.Degraded {
		t.Errorf("after Degraded() turned false: got a degraded decision")
	}
}

// TestRestartLeavesNoStaleConnection restarts Redis under a store with 8
// connections, of which a probe's PING tests only one: once the store is
// back, no decision falls back because it rode a connection that broke
// while Redis was away (such a command never reached Redis and is sent
// again on a fresh connection).
func TestRestartLeavesNoStaleConnection(t *testing.T) {
	srv := redistest.Start(t)
	fake := clock.NewFake(epoch)
	var failures atomic.Int64
	store := open(t, redisstore.Options{URL: srv.URL(), Timeout: slow, BreakerThreshold: 1, Connections: 8,
		OnFailure: func(error) { failures.Add(1) }})
	redisstore.SetBreakerClock(store, fake.Now)
	lim := limiter(t, store, "stale", hourly)
	for i := range 64 { // spread over the connections
		allow(t, lim, fmt.Sprint("k", i))
	}
	srv.Stop()
	if d := allow(t, lim, "k"); !d.Degraded {
		t.Fatalf("Redis down: decision not degraded")
	}
	srv.Restart(t)
	fake.Advance(1250 * time.Millisecond)
	eventually(t, 5*time.Second, func() bool { return !store.Degraded() },
		func() string { return "Redis back and a probe due: Degraded() still true" })
	before := failures.Load()
	for i := range 64 {
		if d := allow(t, lim, fmt.Sprint("k", i)); d.Degraded {
			t.Fatalf("decision %d after recovery fell back (%d failures since)", i, failures.Load()-before)
		}
	}
}

// TestIdleConnectionsAcrossRestart restarts Redis under a store with
// decisions made while it is down: the first command on each connection
// after the restart may find it closed by the old server (the read gets
// EOF, or the write fails), and is sent again on a fresh connection rather
// than failing.
func TestIdleConnectionsAcrossRestart(t *testing.T) {
	srv := redistest.Start(t)
	var failures atomic.Int64
	store := open(t, redisstore.Options{URL: "redis://" + srv.Addr, Timeout: slow, BreakerThreshold: 1000, Connections: 8,
		OnFailure: func(error) { failures.Add(1) }})
	lim := limiter(t, store, "idle", hourly)
	for round := range 3 {
		for i := range 64 { // spread over the connections
			allow(t, lim, fmt.Sprint("k", i))
		}
		srv.Stop()
		for i := range 8 { // fail, and leave the connections to be redialed
			allow(t, lim, fmt.Sprint("k", i))
		}
		srv.Restart(t)
		for i := range 64 {
			if d := allow(t, lim, fmt.Sprint("k", i)); d.Degraded {
				t.Fatalf("round %d: decision %d after a restart fell back (%d failures)", round, i, failures.Load())
			}
		}
	}
}
