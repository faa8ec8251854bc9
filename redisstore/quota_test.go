package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// quotaStores opens n stores on srv, each with its own client, on clk.
func quotaStores(t *testing.T, srv *redistest.Server, clk *clock.Fake, n int, opts redisstore.Options) []*redisstore.Store {
	t.Helper()
	out := make([]*redisstore.Store, n)
	for i := range out {
		o := opts
		o.URL, o.Clock, o.Timeout = "redis://"+srv.Addr, clk, 5*time.Second
		out[i] = open(t, o)
	}
	return out
}

// synced returns a copy of p in mode m.
// decisionLimit is what a Decision's Limit says for l: its burst for the
// bucket algorithms, its count for the windows.
func decisionLimit(l sluice.Limit) int64 {
	if (l.Algorithm == sluice.TokenBucket || l.Algorithm == sluice.GCRA) && l.Burst > 0 {
		return l.Burst
	}
	return l.Count
}

func synced(t *testing.T, p *sluice.Policy, m sluice.SyncMode) *sluice.Policy {
	t.Helper()
	q, err := p.WithSync(sluice.Sync{Mode: m})
	if err != nil {
		t.Fatalf("WithSync(%v): %v", m, err)
	}
	return q
}

// storm makes perWorker takes of key under p on each of workers goroutines
// per store, all at once, and returns how many were admitted. Errors and
// degraded decisions fail t.
func storm(t *testing.T, stores []*redisstore.Store, p *sluice.Policy, key string, workers, perWorker int) int64 {
	t.Helper()
	var admitted, bad atomic.Int64
	var inconsistent atomic.Pointer[sluice.Decision]
	ceiling := decisionLimit(p.Limit(0))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, s := range stores {
		for range workers {
			wg.Go(func() {
				<-start
				for range perWorker {
					d, err := s.Take(context.Background(), p, key, 1)
					switch {
					case err != nil || d.Degraded:
						bad.Add(1)
					case d.Allowed:
						admitted.Add(1)
					}
					if err == nil && (d.Limit != ceiling || d.Remaining < 0 || d.Remaining > d.Limit) {
						inconsistent.Store(&d)
					}
				}
			})
		}
	}
	close(start)
	wg.Wait()
	if n := bad.Load(); n > 0 {
		t.Fatalf("%d decisions failed or degraded", n)
	}
	if d := inconsistent.Load(); d != nil {
		t.Fatalf("a decision said Limit %d, Remaining %d; want Limit %d (the limit's burst, its count for a window) and Remaining from 0 to Limit", d.Limit, d.Remaining, ceiling)
	}
	return admitted.Load()
}

// wantLeasesPaid fails t unless the stores decided at least five times as
// many requests locally as they made calls to Redis.
func wantLeasesPaid(t *testing.T, stores []*redisstore.Store) {
	t.Helper()
	var local, calls int64
	for _, s := range stores {
		st := s.QuotaStats()
		local, calls = local+st.Local, calls+st.Calls
	}
	if calls*5 > local {
		t.Errorf("%d calls to Redis for %d local decisions: leases did not pay", calls, local)
	}
}

// unused sums the stores' leased but unspent units.
func unused(stores []*redisstore.Store) int64 {
	var n int64
	for _, s := range stores {
		n += s.QuotaStats().LeasedUnused
	}
	return n
}

// In lease mode, four stores hammering one key of a fixed window admit
// never more than the limit in any window; Redis's count is exactly what
// was admitted plus what the stores hold unspent in leases, and the
// requests refused while units were held are bounded by the leases.
func TestQuotaLeaseFixedWindowExact(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epoch)
	stores := quotaStores(t, srv, clk, 4, redisstore.Options{LeaseRate: 1, LeaseFraction: 0.05})
	const limit = 1000
	p := synced(t, policy(t, "qfw", sluice.Limit{Algorithm: sluice.FixedWindow, Count: limit, Period: time.Second}), sluice.SyncLease)
	exact := open(t, redisstore.Options{URL: "redis://" + srv.Addr, Clock: clk, Timeout: 5 * time.Second})
	plain := policy(t, "qfw", sluice.Limit{Algorithm: sluice.FixedWindow, Count: limit, Period: time.Second})
	for w := range 3 {
		got := storm(t, stores, p, "hot", 8, 400)
		if got > limit {
			t.Fatalf("window %d: admitted %d, limit %d", w, got, limit)
		}
		held := unused(stores)
		d, err := exact.Peek(context.Background(), plain, "hot")
		if err != nil {
			t.Fatal(err)
		}
		if charged := limit - d.Remaining; charged != got+held {
			t.Fatalf("window %d: Redis counts %d, want admitted %d + held %d", w, charged, got, held)
		}
		// The bound on under-admission: at most every store's lease.
		if short := limit - got; short > held || short > 4*limit/20 {
			t.Fatalf("window %d: admitted %d of %d with %d units held", w, got, limit, held)
		}
		t.Logf("window %d: admitted %d, held unspent %d", w, got, held)
		clk.Advance(time.Second)
	}
	wantLeasesPaid(t, stores)
}

// A bucket's lease records keep leases exact: tokens held unspent in a
// lease do not let the bucket refill past Burst, so a store that drains the
// bucket while another holds a lease gets, after a full refill, Burst less
// the held units, never more.
func TestQuotaLeaseBucketFloor(t *testing.T) {
	for _, alg := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			clk := clock.NewFake(epoch)
			// a leases (at its first decision: 1/s for a quarter of 40s is
			// 10, at most 5% of 100); b never does, and decides exactly.
			a := quotaStores(t, srv, clk, 1, redisstore.Options{LeaseRate: 1, LeaseFraction: 0.05, LeaseTTL: 40 * time.Second})[0]
			b := quotaStores(t, srv, clk, 1, redisstore.Options{LeaseRate: 1 << 30})
			p := synced(t, policy(t, "qb", sluice.Limit{Algorithm: alg, Count: 100, Period: time.Second}), sluice.SyncLease)
			ctx := context.Background()
			if d, err := a.Take(ctx, p, "k", 1); err != nil || !d.Allowed {
				t.Fatalf("first take: %+v, %v", d, err)
			}
			if held := a.QuotaStats().LeasedUnused; held != 4 {
				t.Fatalf("a holds %d units, want 4 of a lease of 5", held)
			}
			if got := storm(t, b, p, "k", 4, 50); got != 95 {
				t.Fatalf("b admitted %d of the 95 left, want 95", got)
			}
			clk.Advance(time.Second / 2) // a full refill would take 1s
			if got := storm(t, b, p, "k", 4, 50); got != 50 {
				t.Fatalf("b admitted %d in 0.5s at 100/s, want 50", got)
			}
			clk.Advance(2 * time.Second) // full again, but for the lease
			got2 := storm(t, b, p, "k", 4, 50)
			got3 := storm(t, []*redisstore.Store{a}, p, "k", 1, 20)
			if got2 != 95 || got3 != 4 {
				t.Fatalf("after a full refill b admitted %d and a %d from its lease; want 95 and 4 (the bucket holds 100, 5 of them leased)", got2, got3)
			}
		})
	}
}

// A store that dies holding a lease (never returns it) keeps the limit:
// its units are lost until the lease's time to live has passed, then the
// bucket refills as usual.
func TestQuotaLeaseCrash(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epoch)
	// A lease is 10 (1/s for a quarter of 40s, at most 10% of 100).
	opts := redisstore.Options{URL: "redis://" + srv.Addr, Clock: clk, Timeout: 5 * time.Second, LeaseRate: 1, LeaseFraction: 0.1, LeaseTTL: 40 * time.Second}
	// crashed is never closed, so its lease is never returned; only its
	// client is, when the test ends.
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	copts := opts
	copts.URL, copts.Client = "", client
	crashed, err := redisstore.New(copts)
	if err != nil {
		t.Fatal(err)
	}
	opts.LeaseRate = 1 << 30 // live decides exactly
	live := open(t, opts)
	p := synced(t, policy(t, "qc", sluice.Limit{Algorithm: sluice.TokenBucket, Count: 100, Period: time.Second}), sluice.SyncLease)
	ctx := context.Background()
	if d, err := crashed.Take(ctx, p, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("take: %+v, %v", d, err)
	}
	if held := crashed.QuotaStats().LeasedUnused; held != 9 {
		t.Fatalf("crashed holds %d, want 9", held)
	}
	stores := []*redisstore.Store{live}
	if got := storm(t, stores, p, "k", 4, 50); got != 90 {
		t.Fatalf("admitted %d, want the 90 not leased", got)
	}
	clk.Advance(30 * time.Second) // the lease still runs: the bucket is full but for its 10
	if got := storm(t, stores, p, "k", 4, 50); got != 90 {
		t.Fatalf("admitted %d during the lease, want 90", got)
	}
	clk.Advance(11 * time.Second) // the lease has expired: its units are spent as of now
	if got := storm(t, stores, p, "k", 4, 50); got != 90 {
		t.Fatalf("admitted %d at the expiry, want 90", got)
	}
	clk.Advance(100 * time.Millisecond) // the 10 refill
	if got := storm(t, stores, p, "k", 4, 50); got != 10 {
		t.Fatalf("admitted %d after the expiry, want 10", got)
	}
}

// A lease in hand keeps deciding while Redis is down; then the store's
// OnError applies; when Redis is back nothing the lease held is spent
// twice: a window never admits more than its limit from Redis and leases.
func TestQuotaLeaseRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epoch)
	opts := redisstore.Options{URL: "redis://" + srv.Addr, Clock: clk, Timeout: 300 * time.Millisecond, LeaseRate: 1, LeaseFraction: 0.1, LeaseTTL: 40 * time.Second, OnError: redisstore.Deny, BreakerThreshold: 1000}
	a, b := open(t, opts), open(t, opts)
	p := synced(t, policy(t, "qd", sluice.Limit{Algorithm: sluice.FixedWindow, Count: 100, Period: time.Minute}), sluice.SyncLease)
	ctx := context.Background()
	if d, err := a.Take(ctx, p, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("take: %+v, %v", d, err)
	}
	srv.Pause(t)
	admitted := int64(1)
	for i := range 9 {
		d, err := a.Take(ctx, p, "k", 1)
		if err != nil || !d.Allowed || d.Degraded {
			t.Fatalf("take %d from the lease with Redis down: %+v, %v", i, d, err)
		}
		admitted++
	}
	d, err := a.Take(ctx, p, "k", 1)
	if err != nil || d.Allowed || !d.Degraded {
		t.Fatalf("take past the lease with Redis down: %+v, %v; want a degraded denial (OnError Deny)", d, err)
	}
	srv.Resume(t)
	for _, s := range []*redisstore.Store{a, b} {
		for range 200 {
			d, err := s.Take(ctx, p, "k", 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed && !d.Degraded {
				admitted++
			}
		}
	}
	// The call that timed out asked for a lease of 10; Redis, paused, ran
	// it when resumed, and its answer was lost: those 10 are charged and
	// never spent (a timed-out decision may be charged). Never more than
	// the limit.
	if admitted > 100 || admitted < 90 {
		t.Fatalf("admitted %d in the window across the outage, want 90 to 100", admitted)
	}
}

// In async mode, n stores each offered r requests per second on one key
// of a fixed window admit no more than Count + (n-1)×r×2×Interval in a
// window (the bound in docs/hot-keys.md), and decide nearly every request locally.
func TestQuotaAsyncBound(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epoch)
	const n, count, interval = 4, 1000, 100 * time.Millisecond
	const step = 10 * time.Millisecond
	const perStep = 20 // per store: 2000/s offered, against 1000/s allowed
	stores := quotaStores(t, srv, clk, n, redisstore.Options{})
	p, err := policy(t, "qa", sluice.Limit{Algorithm: sluice.FixedWindow, Count: count, Period: time.Second}).WithSync(sluice.Sync{Mode: sluice.SyncAsync, Interval: interval})
	if err != nil {
		t.Fatal(err)
	}
	const rate = perStep * int64(time.Second/step)
	bound := int64(count) + (n-1)*rate*int64(2*interval)/int64(time.Second)
	for w := range 3 {
		var admitted int64
		for range time.Second / step {
			admitted += storm(t, stores, p, "hot", 1, perStep)
			clk.Advance(step)
		}
		if admitted > bound {
			t.Fatalf("window %d: admitted %d, bound %d", w, admitted, bound)
		}
		if admitted < count {
			t.Fatalf("window %d: admitted %d, fewer than the limit %d under 2x load", w, admitted, count)
		}
		t.Logf("window %d: admitted %d (limit %d, bound %d)", w, admitted, count, bound)
	}
	wantLeasesPaid(t, stores)
}

func TestSyncValidation(t *testing.T) {
	p := policy(t, "v", sluice.Limit{Algorithm: sluice.SlidingLog, Count: 10, Period: time.Second})
	if _, err := p.WithSync(sluice.Sync{Mode: sluice.SyncLease}); !errors.Is(err, sluice.ErrInvalidSync) {
		t.Errorf("lease on sliding_log: %v, want ErrInvalidSync", err)
	}
	q := policy(t, "v2", sluice.Limit{Algorithm: sluice.GCRA, Count: 10, Period: time.Second})
	if _, err := q.WithSync(sluice.Sync{Mode: sluice.SyncAsync, Interval: time.Microsecond}); !errors.Is(err, sluice.ErrInvalidSync) {
		t.Errorf("async every 1µs: %v, want ErrInvalidSync", err)
	}
	if _, err := sluice.ParseSyncMode("eventual"); !errors.Is(err, sluice.ErrInvalidSync) {
		t.Errorf("ParseSyncMode(eventual): %v", err)
	}
}

// In lease mode, four stores hammering one bucket key, phase after phase
// of 100ms, admit no more in any run of phases than one bucket would:
// Burst plus the rate times the run's length. Under saturation they admit
// nearly that much; what they fall short by is held in leases.
func TestQuotaLeaseBucketStorm(t *testing.T) {
	for _, alg := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			clk := clock.NewFake(epoch)
			stores := quotaStores(t, srv, clk, 4, redisstore.Options{LeaseRate: 1, LeaseFraction: 0.05, LeaseTTL: 400 * time.Millisecond})
			const burst, rate, phases = 500, 1000, 12 // rate per second; a phase is 100ms: 100 tokens
			p := synced(t, policy(t, "qbs", sluice.Limit{Algorithm: alg, Count: rate, Period: time.Second, Burst: burst}), sluice.SyncLease)
			var got [phases]int64
			for k := range phases {
				got[k] = storm(t, stores, p, "hot", 4, 100)
				clk.Advance(100 * time.Millisecond)
			}
			var total int64
			for j := range phases {
				var run int64
				for k := j; k < phases; k++ {
					run += got[k]
					if most := int64(burst + rate/10*(k-j)); run > most {
						t.Fatalf("phases %d..%d admitted %d, more than one bucket's %d (per phase: %v)", j, k, run, most, got)
					}
				}
				total += got[j]
			}
			most := int64(burst + rate/10*(phases-1))
			if total+unused(stores) < most*9/10 {
				t.Errorf("admitted %d and held %d of the %d a bucket admits: leases wasted too much (per phase: %v)", total, unused(stores), most, got)
			}
			t.Logf("admitted %d of %d (per phase %v), held unspent %d", total, most, got, unused(stores))
		})
	}
}

// Redis stopped and restarted under load, in each mode: decisions keep
// coming (degraded while Redis is away, per OnError Local), none fails,
// and once Redis is back a fresh window admits no more than its limit
// (lease, exact) or its bound (async).
func TestQuotaRedisRestartUnderLoad(t *testing.T) {
	for _, mode := range []sluice.SyncMode{sluice.SyncExact, sluice.SyncLease, sluice.SyncAsync} {
		t.Run(mode.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			clk := clock.NewFake(epoch)
			stores := make([]*redisstore.Store, 2)
			// Calls to Redis that failed, per store.
			var calls [2]atomic.Int64
			for i := range stores {
				stores[i] = open(t, redisstore.Options{URL: "redis://" + srv.Addr, Clock: clk, Timeout: 5 * time.Second, LeaseRate: 1, BreakerThreshold: 1, BreakerCooldown: 50 * time.Millisecond,
					OnFailure: func(error) { calls[i].Add(1) }})
			}
			p := synced(t, policy(t, "qr", sluice.Limit{Algorithm: sluice.FixedWindow, Count: 1000, Period: time.Minute}), mode)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var failed, during atomic.Int64
			var down atomic.Bool
			for _, s := range stores {
				for range 4 {
					wg.Go(func() {
						for {
							select {
							case <-stop:
								return
							default:
							}
							outage := down.Load()
							if _, err := s.Take(context.Background(), p, "load", 1); err != nil {
								failed.Add(1)
							}
							if outage {
								during.Add(1)
							}
						}
					})
				}
			}
			srv.Stop()
			down.Store(true)
			// The load runs into the outage: takes made while Redis is
			// down, and every store has had a call to Redis fail.
			eventually(t, 10*time.Second, func() bool {
				return during.Load() >= 200 && calls[0].Load() > 0 && calls[1].Load() > 0
			}, func() string {
				return fmt.Sprintf("with Redis down: %d takes, failed calls per store %d and %d; want 200 takes and a failed call on each", during.Load(), calls[0].Load(), calls[1].Load())
			})
			srv.Restart(t)
			for _, s := range stores {
				eventually(t, 10*time.Second, func() bool {
					redisstore.ProbeDue(s)
					d, err := s.Take(context.Background(), p, "probe", 1)
					return err == nil && !d.Degraded
				}, func() string { return "Redis back: decisions still degraded" })
			}
			close(stop)
			wg.Wait()
			if n := failed.Load(); n > 0 {
				t.Fatalf("%d decisions failed during the outage", n)
			}
			clk.Advance(time.Minute) // a fresh window
			for _, s := range stores {
				s.SyncNow()
			}
			var admitted int64
			for _, s := range stores {
				for range 1500 {
					d, err := s.Take(context.Background(), p, "fresh", 1)
					if err != nil || d.Degraded {
						t.Fatalf("after recovery: %+v, %v", d, err)
					}
					if d.Allowed {
						admitted++
					}
				}
			}
			most := int64(1000)
			if mode == sluice.SyncAsync {
				most = 2000 // two stores, each deciding a whole window before it syncs
			}
			if admitted > most || admitted < 1000 {
				t.Fatalf("after recovery: admitted %d, want 1000 to %d", admitted, most)
			}
		})
	}
}

// In async mode a bucket shared by four stores, each offered twice the
// rate, admits over any run of 10ms phases no more than one bucket would
// plus the async bound's term, (n-1)×r×2×Interval; and over the whole run
// at least what one bucket admits less that term (no under-admission
// beyond the stale views).
func TestQuotaAsyncBucketBound(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epoch)
	const n, rate, burst, interval = 4, 1000, 200, 100 * time.Millisecond
	const step, phases = 10 * time.Millisecond, 150
	const perStep = 20 // per store: 2000/s offered
	stores := quotaStores(t, srv, clk, n, redisstore.Options{})
	p, err := policy(t, "qab", sluice.Limit{Algorithm: sluice.GCRA, Count: rate, Period: time.Second, Burst: burst}).WithSync(sluice.Sync{Mode: sluice.SyncAsync, Interval: interval})
	if err != nil {
		t.Fatal(err)
	}
	const offered = perStep * int64(time.Second/step)
	slack := (n - 1) * offered * int64(2*interval) / int64(time.Second)
	var got [phases]int64
	for k := range phases {
		got[k] = storm(t, stores, p, "hot", 1, perStep)
		clk.Advance(step)
	}
	var total int64
	for j := range phases {
		var run int64
		for k := j; k < phases; k++ {
			run += got[k]
			if most := int64(burst) + int64(rate)*int64(k-j+1)*int64(step)/int64(time.Second) + slack; run > most {
				t.Fatalf("phases %d..%d admitted %d, more than %d", j, k, run, most)
			}
		}
		total += got[j]
	}
	whole := int64(burst) + int64(rate)*phases*int64(step)/int64(time.Second)
	if total < whole-slack {
		t.Errorf("admitted %d over the run, a bucket admits %d: too few", total, whole)
	}
	t.Logf("admitted %d over %v; one bucket admits %d; bound %d", total, time.Duration(phases)*step, whole, whole+slack)
}

// A policy rebuilt with the same limit (a reload) spends on the lease the
// old one took; rebuilt with another, it returns the lease's unused units
// with its first lease, so nothing stays held.
func TestQuotaLeaseReload(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epoch)
	s := quotaStores(t, srv, clk, 1, redisstore.Options{LeaseRate: 1, LeaseFraction: 0.1, LeaseTTL: 40 * time.Second})[0]
	ctx := context.Background()
	limit := sluice.Limit{Algorithm: sluice.FixedWindow, Count: 100, Period: time.Minute}
	p := synced(t, policy(t, "ql", limit), sluice.SyncLease)
	if d, err := s.Take(ctx, p, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("take: %+v, %v", d, err)
	}
	calls := s.QuotaStats().Calls
	same := synced(t, policy(t, "ql", limit), sluice.SyncLease)
	for range 9 {
		if d, err := s.Take(ctx, same, "k", 1); err != nil || !d.Allowed {
			t.Fatalf("take: %+v, %v", d, err)
		}
	}
	if got := s.QuotaStats().Calls; got != calls {
		t.Fatalf("the rebuilt policy made %d calls; want its decisions from the lease in hand", got-calls)
	}
	if held := s.QuotaStats().LeasedUnused; held != 0 {
		t.Fatalf("held %d after spending the lease of 10", held)
	}
	// Another lease of up to 10, then a policy of a raised limit.
	if d, err := s.Take(ctx, same, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("take: %+v, %v", d, err)
	}
	raised := synced(t, policy(t, "ql", sluice.Limit{Algorithm: sluice.FixedWindow, Count: 200, Period: time.Minute}), sluice.SyncLease)
	exact := open(t, redisstore.Options{URL: "redis://" + srv.Addr, Clock: clk, Timeout: 5 * time.Second})
	d, err := s.Take(ctx, raised, "k", 1)
	if err != nil || !d.Allowed {
		t.Fatalf("take: %+v, %v", d, err)
	}
	held := s.QuotaStats().LeasedUnused
	pd, err := exact.Peek(ctx, policy(t, "ql", sluice.Limit{Algorithm: sluice.FixedWindow, Count: 200, Period: time.Minute}), "k")
	if err != nil {
		t.Fatal(err)
	}
	// Admitted: 10 + 1 + 1; Redis counts exactly those and the lease held.
	if charged := 200 - pd.Remaining; charged != 12+held {
		t.Fatalf("Redis counts %d, want 12 admitted + %d held: the old lease's unused units were not returned", charged, held)
	}
}

// Without Options.Clock, a decision from a lease or an async view is dated
// now on the wall clock, as one from Redis is.
func TestQuotaLocalDecisionTime(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, redisstore.Options{URL: "redis://" + srv.Addr, Timeout: 5 * time.Second, LeaseRate: 1})
	for _, m := range []sluice.SyncMode{sluice.SyncLease, sluice.SyncAsync} {
		p := synced(t, policy(t, "qt-"+m.String(), sluice.Limit{Algorithm: sluice.GCRA, Count: 1000, Period: time.Second}), m)
		for i := range 5 {
			d, err := s.Take(context.Background(), p, "k", 1)
			if err != nil || !d.Allowed {
				t.Fatalf("%v take %d: %+v, %v", m, i, d, err)
			}
			if off := time.Since(d.Time); off < -time.Second || off > time.Second {
				t.Fatalf("%v take %d: Time %v is %v from now", m, i, d.Time, off)
			}
		}
	}
}

// Reset forgets a leased key everywhere: in Redis (with its lease
// records) and in the store's hand, so the key starts afresh.
func TestQuotaLeaseReset(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epoch)
	s := quotaStores(t, srv, clk, 1, redisstore.Options{LeaseRate: 1, LeaseFraction: 0.1, LeaseTTL: 40 * time.Second})[0]
	p := synced(t, policy(t, "qrs", sluice.Limit{Algorithm: sluice.TokenBucket, Count: 100, Period: time.Hour}), sluice.SyncLease)
	ctx := context.Background()
	// 55 admitted, the last lease partly spent: its record is live.
	if got := storm(t, []*redisstore.Store{s}, p, "k", 1, 55); got != 55 {
		t.Fatalf("admitted %d, want 55", got)
	}
	if s.QuotaStats().LeasedUnused == 0 {
		t.Fatal("no lease in hand")
	}
	if err := s.Reset(ctx, p, "k"); err != nil {
		t.Fatal(err)
	}
	if held := s.QuotaStats().LeasedUnused; held != 0 {
		t.Fatalf("held %d after Reset", held)
	}
	if got := storm(t, []*redisstore.Store{s}, p, "k", 1, 150); got != 100 {
		t.Fatalf("after Reset admitted %d, want a fresh 100 (no lease records left holding it)", got)
	}
}

// LeasedUnused counts only live leases: a lease that ends (its time to
// live for a bucket, its window for a fixed window) on a key that sees no
// decision since counts no more, and the key's next lease is counted
// afresh, never below zero.
func TestQuotaLeasedUnusedEnds(t *testing.T) {
	for _, tc := range []struct {
		alg       sluice.Algorithm
		ttl, wait time.Duration
	}{
		{sluice.TokenBucket, 40 * time.Second, 40 * time.Second}, // ends with its time to live
		{sluice.FixedWindow, 90 * time.Second, time.Minute},      // ends with its window
	} {
		t.Run(tc.alg.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			clk := clock.NewFake(epoch)
			// A lease is 10: 1/s for a quarter of the ttl, at most 10% of 100.
			s := quotaStores(t, srv, clk, 1, redisstore.Options{LeaseRate: 1, LeaseFraction: 0.1, LeaseTTL: tc.ttl})[0]
			p := synced(t, policy(t, "qu", sluice.Limit{Algorithm: tc.alg, Count: 100, Period: time.Minute}), sluice.SyncLease)
			ctx := context.Background()
			if d, err := s.Take(ctx, p, "k", 1); err != nil || !d.Allowed {
				t.Fatalf("take: %+v, %v", d, err)
			}
			if held := s.QuotaStats().LeasedUnused; held != 9 {
				t.Fatalf("held %d, want 9 of a lease of 10", held)
			}
			clk.Advance(tc.wait - time.Second) // not yet: the lease stops 1ms + 1% early
			if held := s.QuotaStats().LeasedUnused; held != 9 {
				t.Fatalf("held %d before the lease ends, want 9", held)
			}
			clk.Advance(time.Second)
			if held := s.QuotaStats().LeasedUnused; held != 0 {
				t.Fatalf("held %d after the lease ended with no decision since, want 0", held)
			}
			if d, err := s.Take(ctx, p, "k", 1); err != nil || !d.Allowed {
				t.Fatalf("take after the lease: %+v, %v", d, err)
			}
			if held := s.QuotaStats().LeasedUnused; held != 9 {
				t.Fatalf("held %d after the next lease, want 9", held)
			}
		})
	}
}

// A fleet mid-rollout, some processes deciding a policy exactly and some
// in lease mode, still never exceeds its limit. On a bucket, an exact
// decision minds the live lease records (plain.lua), so tokens held in a
// lease are not refilled on top for it (without that, b gets 100 after
// the refill, and the bucket admits 104 where one admits 100); once the
// lease ends unreturned, its units count as spent as of the next decision,
// as quota.lua counts them, and then refill. On a fixed window, leased
// units are counted in the window's count, which exact decisions read: a
// window admits exactly its limit.
func TestQuotaLeaseMixedWithExact(t *testing.T) {
	for _, alg := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			clk := clock.NewFake(epoch)
			// a leases at its first decision (a lease of 5: 5% of 100); b
			// decides the same policy in exact mode.
			stores := quotaStores(t, srv, clk, 2, redisstore.Options{LeaseRate: 1, LeaseFraction: 0.05, LeaseTTL: 40 * time.Second})
			a, b := stores[0], stores[1:]
			exact := policy(t, "qm", sluice.Limit{Algorithm: alg, Count: 100, Period: time.Second})
			leased := synced(t, exact, sluice.SyncLease)
			ctx := context.Background()
			if d, err := a.Take(ctx, leased, "k", 1); err != nil || !d.Allowed {
				t.Fatalf("first take: %+v, %v", d, err)
			}
			if got := storm(t, b, exact, "k", 4, 50); got != 95 {
				t.Fatalf("b admitted %d of the 95 left, want 95", got)
			}
			if d, err := b[0].Peek(ctx, exact, "k"); err != nil || d.Remaining != 0 {
				t.Fatalf("peek: %+v, %v; want 0 remaining", d, err)
			}
			clk.Advance(2 * time.Second) // full again, but for the lease
			if d, err := b[0].Peek(ctx, exact, "k"); err != nil || d.Remaining != 95 {
				t.Fatalf("peek after the refill: %+v, %v; want 95 remaining (5 leased)", d, err)
			}
			got2 := storm(t, b, exact, "k", 4, 50)
			got3 := storm(t, []*redisstore.Store{a}, leased, "k", 1, 4)
			if got2 != 95 || got3 != 4 {
				t.Fatalf("after a full refill b admitted %d exactly and a %d from its lease; want 95 and 4 (the bucket holds 100, 5 of them leased)", got2, got3)
			}
			// A reservation (exact) minds the lease too: with the bucket
			// full but for a new lease of 5, 96 tokens are 10ms away.
			clk.Advance(2 * time.Second)
			if d, err := a.Take(ctx, leased, "k", 1); err != nil || !d.Allowed {
				t.Fatalf("take: %+v, %v", d, err)
			}
			clk.Advance(2 * time.Second)
			d, err := b[0].Reserve(ctx, exact, "k", 96, time.Hour)
			if err != nil || !d.Allowed || d.Delay != 10*time.Millisecond {
				t.Fatalf("reserve: %+v, %v; want a delay of 10ms", d, err)
			}
			// The lease has ended, unreturned: a may have spent it up to its
			// end, so its 5 count as spent as of b's next decision, which
			// takes them into the bucket's debt and drops the record.
			clk.Advance(41 * time.Second)
			if got := storm(t, b, exact, "k", 4, 50); got != 95 {
				t.Fatalf("at the lease's end b admitted %d, want 95 (its 5 spent as of now)", got)
			}
			clk.Advance(time.Second) // a full refill, with no record left
			if got := storm(t, b, exact, "k", 4, 50); got != 100 {
				t.Fatalf("a second after the lease's end b admitted %d, want the full 100", got)
			}
		})
	}
	t.Run("fixed_window", func(t *testing.T) {
		srv := redistest.Start(t)
		clk := clock.NewFake(epoch)
		stores := quotaStores(t, srv, clk, 4, redisstore.Options{LeaseRate: 1, LeaseFraction: 0.05, LeaseTTL: 40 * time.Second})
		exact := policy(t, "qmw", sluice.Limit{Algorithm: sluice.FixedWindow, Count: 1000, Period: time.Minute})
		leased := synced(t, exact, sluice.SyncLease)
		for w := range 3 {
			var admitted, bad atomic.Int64
			var wg sync.WaitGroup
			for i, s := range stores {
				p := exact
				if i%2 == 0 {
					p = leased
				}
				// 1200 attempts a store: each is refused at least once,
				// so none ends the window holding leased units.
				for range 4 {
					wg.Go(func() {
						for range 300 {
							d, err := s.Take(context.Background(), p, "k", 1)
							switch {
							case err != nil || d.Degraded:
								bad.Add(1)
							case d.Allowed:
								admitted.Add(1)
							}
						}
					})
				}
			}
			wg.Wait()
			if n := bad.Load(); n > 0 {
				t.Fatalf("window %d: %d decisions failed or degraded", w, n)
			}
			if got := admitted.Load(); got != 1000 {
				t.Fatalf("window %d: admitted %d, want exactly 1000", w, got)
			}
			clk.Advance(time.Minute)
		}
	})
}

// A lease that ended unreturned may have been spent in full: an exact
// decision on the bucket (plain.lua) counts its units as spent as of now,
// and the first one that writes the bucket's state takes them into the
// debt and deletes the lease's record, so that the bucket then refills in
// full. Each way plain.lua writes a bucket: one limit, several (a batch of
// writes made once all admit) and a refund.
func TestExactDecisionDropsEndedLeases(t *testing.T) {
	srv := redistest.Start(t)
	bucket := sluice.Limit{Algorithm: sluice.GCRA, Count: 100, Period: time.Second}
	window := sluice.Limit{Algorithm: sluice.FixedWindow, Count: 1000, Period: time.Hour}
	for _, c := range []struct {
		name   string
		limits []sluice.Limit
		decide func(s *redisstore.Store, p *sluice.Policy, now time.Time) error
		want   int64 // remaining right after
	}{
		{"one_limit", []sluice.Limit{bucket}, func(s *redisstore.Store, p *sluice.Policy, _ time.Time) error {
			_, err := s.Take(context.Background(), p, "k", 1)
			return err
		}, 94},
		{"two_limits", []sluice.Limit{bucket, window}, func(s *redisstore.Store, p *sluice.Policy, _ time.Time) error {
			_, err := s.Take(context.Background(), p, "k", 1)
			return err
		}, 94},
		{"refund", []sluice.Limit{bucket}, func(s *redisstore.Store, p *sluice.Policy, now time.Time) error {
			return s.Cancel(context.Background(), p, "k", 10, now.Add(time.Hour))
		}, 95},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := clock.NewFake(epoch)
			s := open(t, redisstore.Options{URL: "redis://" + srv.Addr, Prefix: "ended-" + c.name, Clock: clk, Timeout: slow, Coalesce: 1, DenyCache: -1})
			p := policy(t, "p", c.limits...)
			ctx := context.Background()
			if c.name == "refund" {
				// A reservation of 10 to refund.
				if d, err := s.Reserve(ctx, p, "k", 10, 0); err != nil || !d.Allowed {
					t.Fatalf("reserve: %+v, %v", d, err)
				}
			}
			// A lease of 5 that ended a second ago, as quota.lua records it.
			records := "ended-" + c.name + ":{1:p:k}:0:g"
			srv.Do(t, "HSET", records, "lease", fmt.Sprintf("5:%d", clk.Now().Add(-time.Second).UnixMicro()))
			if err := c.decide(s, p, clk.Now()); err != nil {
				t.Fatal(err)
			}
			if n := srv.Do(t, "HLEN", records); n != "0" {
				t.Errorf("lease records after the decision: %s, want the ended one deleted", n)
			}
			if d, err := s.Peek(ctx, p, "k"); err != nil || d.Remaining != c.want {
				t.Errorf("peek: got %+v, %v; want %d remaining (the lease's 5 spent)", d, err, c.want)
			}
			clk.Advance(time.Second)
			if d, err := s.Peek(ctx, p, "k"); err != nil || d.Remaining != 100 {
				t.Errorf("a second later: got %+v, %v; want 100 remaining, the lease's units refilled", d, err)
			}
		})
	}
}

// TestQuotaLeaseColdKeysShareCalls hammers one key of a lease-mode window
// on two stores whose LeaseRate no key reaches: every request is decided
// in Redis, as in exact mode, exactly the limit is admitted, and
// concurrent requests share script calls (one call each, queued behind
// the key's entry, before).
func TestQuotaLeaseColdKeysShareCalls(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epoch)
	stores := quotaStores(t, srv, clk, 2, redisstore.Options{LeaseRate: 1000000, DenyCache: -1})
	const limit = 2000
	p := synced(t, policy(t, "cold", sluice.Limit{Algorithm: sluice.FixedWindow, Count: limit, Period: time.Hour}), sluice.SyncLease)
	before := commandCalls(t, srv, "evalsha", "eval")
	admitted := storm(t, stores, p, "k", 64, 40)
	calls := commandCalls(t, srv, "evalsha", "eval") - before
	wantGathered(t, int(admitted), limit, 2*64*40, calls)
	for i, s := range stores {
		if st := s.QuotaStats(); st.Leases != 0 {
			t.Errorf("store %d took %d leases on a key colder than LeaseRate", i, st.Leases)
		}
	}
}
