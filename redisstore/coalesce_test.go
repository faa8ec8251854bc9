package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/storekit"
)

// TestEachMatchesTakes holds the script's "each" op, which decides the takes
// and TakeAll batches the store has gathered into one call, to the same
// takes and batches made one after the other: random calls of up to 10
// groups, each a take or a batch of up to three requests, over three keys
// (so a call often decides one key several times), every algorithm, one or
// two limits, costs up to 3, against a twin store under the same clock.
func TestEachMatchesTakes(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epoch)
	batched := newStore(t, srv, clk, redisstore.Options{Prefix: "each", DenyCache: -1})
	single := newStore(t, srv, clk, redisstore.Options{Prefix: "single", DenyCache: -1, Coalesce: 1})
	policies := []*sluice.Policy{
		policy(t, "gcra", sluice.Limit{Algorithm: sluice.GCRA, Count: 7, Period: 3 * time.Second, Burst: 4}),
		policy(t, "tb", sluice.Limit{Algorithm: sluice.TokenBucket, Count: 5, Period: time.Second, Burst: 3}),
		policy(t, "fw", sluice.Limit{Algorithm: sluice.FixedWindow, Count: 5, Period: time.Second}),
		policy(t, "sw", sluice.Limit{Algorithm: sluice.SlidingWindow, Count: 6, Period: 2 * time.Second}),
		policy(t, "sl", sluice.Limit{Algorithm: sluice.SlidingLog, Count: 4, Period: time.Second}),
		policy(t, "two", sluice.Limit{Algorithm: sluice.GCRA, Count: 10, Period: time.Second, Burst: 3},
			sluice.Limit{Algorithm: sluice.SlidingLog, Count: 6, Period: 2 * time.Second}),
		policy(t, "two-windows", sluice.Limit{Algorithm: sluice.FixedWindow, Count: 4, Period: time.Second},
			sluice.Limit{Algorithm: sluice.SlidingWindow, Count: 9, Period: 5 * time.Second}),
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	decided, batches := 0, 0
	for round := range 300 {
		clk.Advance(time.Duration(rng.Int64N(400)) * time.Millisecond)
		groups := make([][]sluice.Request, 1+rng.IntN(10))
		for i := range groups {
			size := 1
			if rng.IntN(3) == 0 {
				size = 2 + rng.IntN(2)
			}
			seen := map[string]bool{}
			for len(groups[i]) < size {
				p := policies[rng.IntN(len(policies))]
				key := "k" + strconv.Itoa(rng.IntN(3))
				if seen[p.Name()+"/"+key] {
					continue // a batch holds distinct (policy, key) pairs
				}
				seen[p.Name()+"/"+key] = true
				groups[i] = append(groups[i], sluice.Request{Policy: p, Key: key, N: 1 + rng.Int64N(min(3, storekit.Of(p).Rule(0).Capacity()))})
			}
		}
		got, err := redisstore.Each(batched, groups)
		if err != nil {
			t.Fatalf("round %d: each: %v", round, err)
		}
		for i, g := range groups {
			want := make([]sluice.Decision, len(g))
			if len(g) == 1 {
				want[0], err = single.Take(ctx, g[0].Policy, g[0].Key, g[0].N)
			} else {
				_, err = single.TakeAll(ctx, g, want)
				batches++
			}
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			for j, r := range g {
				g, w := got[i][j], want[j]
				if g.Allowed != w.Allowed || g.Remaining != w.Remaining || g.Limit != w.Limit || g.Index != w.Index ||
					g.RetryAfter != w.RetryAfter || g.ResetAfter != w.ResetAfter || !g.Time.Equal(w.Time) || g.Degraded {
					t.Fatalf("round %d, group %d of %d, request %d (%s %s, cost %d): in one call %+v\none after the other %+v",
						round, i+1, len(groups), j+1, r.Policy.Name(), r.Key, r.N, g, w)
				}
				decided++
			}
		}
	}
	t.Logf("%d requests (%d batches among them) in 300 calls", decided, batches)
}

// TestCoalescedTakesAreExact hammers one key with 64 goroutines on each of
// two stores: the store gathers their takes into fewer script calls than
// decisions, and exactly the limit is admitted.
func TestCoalescedTakesAreExact(t *testing.T) {
	srv := redistest.Start(t)
	const limit = 2000
	var lims []*sluice.Limiter
	for range 2 {
		s := open(t, redisstore.Options{URL: srv.URL(), Timeout: 5 * time.Second, DenyCache: -1})
		lims = append(lims, limiter(t, s, "hot", sluice.Limit{Algorithm: sluice.FixedWindow, Count: limit, Period: time.Hour}))
	}
	before := commandCalls(t, srv, "evalsha", "eval")
	admitted := hammer(t, lims, "k", 64, 40)
	calls := commandCalls(t, srv, "evalsha", "eval") - before
	wantGathered(t, admitted, limit, 2*64*40, calls)
}

// TestCoalescedBatchesAreWhole mixes TakeAll batches of two policies with
// takes of the second on one key, 64 goroutines each, so that calls gather
// both: a batch is charged to both policies or to neither, and the second
// policy admits exactly its limit.
func TestCoalescedBatchesAreWhole(t *testing.T) {
	srv := redistest.Start(t)
	store := open(t, redisstore.Options{URL: srv.URL(), Timeout: 5 * time.Second, DenyCache: -1})
	pa := policy(t, "a", sluice.Limit{Algorithm: sluice.FixedWindow, Count: 300, Period: time.Hour})
	pb := policy(t, "b", sluice.Limit{Algorithm: sluice.FixedWindow, Count: 500, Period: time.Hour})
	ctx := context.Background()
	var batches, takes atomic.Int64
	var wg sync.WaitGroup
	before := commandCalls(t, srv, "evalsha", "eval")
	for range 64 {
		wg.Go(func() {
			out := make([]sluice.Decision, 2)
			for range 10 {
				ok, err := store.TakeAll(ctx, []sluice.Request{{Policy: pa, Key: "k", N: 1}, {Policy: pb, Key: "k", N: 1}}, out)
				if err != nil || out[0].Degraded {
					t.Errorf("TakeAll: %v %+v", err, out)
					return
				}
				if ok {
					batches.Add(1)
				}
			}
		})
		wg.Go(func() {
			for range 10 {
				d, err := store.Take(ctx, pb, "k", 1)
				if err != nil || d.Degraded {
					t.Errorf("Take: %v %+v", err, d)
					return
				}
				if d.Allowed {
					takes.Add(1)
				}
			}
		})
	}
	wg.Wait()
	calls := commandCalls(t, srv, "evalsha", "eval") - before
	da, _ := store.Peek(ctx, pa, "k")
	db, _ := store.Peek(ctx, pb, "k")
	if used := 300 - da.Remaining; used != batches.Load() {
		t.Errorf("policy a charged %d times, but %d batches were admitted", used, batches.Load())
	}
	if used := 500 - db.Remaining; used != batches.Load()+takes.Load() || used != 500 {
		t.Errorf("policy b charged %d times for %d batches and %d takes admitted, want both 500", used, batches.Load(), takes.Load())
	}
	if calls >= 1280 {
		t.Errorf("1280 decisions took %d script calls, want them gathered", calls)
	}
	t.Logf("%d batches and %d takes admitted, 1280 decisions in %d script calls", batches.Load(), takes.Load(), calls)
}

// TestCoalescedTakesWithinTimeout stops Redis while takes are in flight and
// queued: every take, sent or queued, answers from the fallback within the
// Timeout of its arrival (plus scheduling slack), and the store recovers
// once Redis is back.
func TestCoalescedTakesWithinTimeout(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 300 * time.Millisecond
	store := open(t, redisstore.Options{URL: srv.URL(), Timeout: timeout, DenyCache: -1, BreakerThreshold: 1000})
	p := policy(t, "p", sluice.Limit{Algorithm: sluice.FixedWindow, Count: 1000, Period: time.Hour})
	ctx := context.Background()
	if _, err := store.Take(ctx, p, "warm", 1); err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	var wg sync.WaitGroup
	took := make([]time.Duration, 40)
	degraded := make([]bool, 40)
	for i := range took {
		wg.Go(func() {
			start := time.Now()
			d, err := store.Take(ctx, p, fmt.Sprint("k", i), 1)
			took[i] = time.Since(start)
			degraded[i] = err == nil && d.Degraded
		})
		if i == 10 {
			// Later arrivals queue behind calls already in flight, half a
			// Timeout younger: a call of takes of both ages must end by
			// the Timeout of its oldest. The gap is real time, as the
			// Timeout is (a deadline on the socket to a paused Redis, which
			// no fake clock reaches); a loaded machine can only widen it,
			// which the bound on each take, from its own arrival, allows.
			time.Sleep(timeout / 2)
		}
	}
	wg.Wait()
	for i, d := range took {
		if !degraded[i] {
			t.Errorf("take %d: not answered by the fallback", i)
		}
		if d > timeout+150*time.Millisecond {
			t.Errorf("take %d took %v, want at most the Timeout %v (plus slack)", i, d, timeout)
		}
	}
	srv.Resume(t)
	eventually(t, 5*time.Second, func() bool {
		d, err := store.Take(ctx, p, "after", 1)
		return err == nil && !d.Degraded
	}, func() string { return "the store did not recover after Redis came back" })
}

// TestCoalescedTakeLeavesTheQueue pauses Redis with both of a store's calls
// in flight and a take queued behind them: when the queued take's caller
// gives up, it returns context.Canceled and leaves the queue. Nothing else
// could end its wait before the calls in flight, which wait for a minute.
func TestCoalescedTakeLeavesTheQueue(t *testing.T) {
	srv := redistest.Start(t)
	store := open(t, redisstore.Options{URL: srv.URL(), Timeout: time.Minute, DenyCache: -1, BreakerThreshold: 1000})
	p := policy(t, "p", sluice.Limit{Algorithm: sluice.FixedWindow, Count: 1000, Period: time.Hour})
	ctx := context.Background()
	if _, err := store.Take(ctx, p, "warm", 1); err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	defer srv.Resume(t)
	fctx, giveUp := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer giveUp()
	for i := range 2 {
		wg.Go(func() { store.Take(fctx, p, fmt.Sprint("first", i), 1) })
	}
	eventually(t, 5*time.Second, func() bool { busy, _ := redisstore.Coalescing(store); return busy == 2 },
		func() string { return "the first two takes did not fill the store's calls" })
	cctx, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		_, err := store.Take(cctx, p, "leaver", 1)
		gaveUp <- err
	}()
	eventually(t, 5*time.Second, func() bool { _, q := redisstore.Coalescing(store); return q == 1 },
		func() string { return "the take did not queue" })
	cancel()
	select {
	case err := <-gaveUp:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("a queued take whose caller gave up: %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second): // a safeguard: the calls ahead wait for a minute
		t.Fatal("a queued take whose caller gave up is still waiting")
	}
	if busy, q := redisstore.Coalescing(store); busy != 2 || q != 0 {
		t.Errorf("after the queued take's caller gave up: %d calls in flight, %d takes queued; want 2 and none", busy, q)
	}
}

// TestCoalescedTakesWithDeadlines is TestCoalescedTakesAreExact with every
// decision made under a deadline, as Envoy's rate-limit calls are: they are
// gathered into calls all the same, and exactly the limit is admitted.
func TestCoalescedTakesWithDeadlines(t *testing.T) {
	srv := redistest.Start(t)
	const limit = 2000
	var lims []*sluice.Limiter
	for range 2 {
		s := open(t, redisstore.Options{URL: srv.URL(), Timeout: 5 * time.Second, DenyCache: -1})
		lims = append(lims, limiter(t, s, "hot", sluice.Limit{Algorithm: sluice.FixedWindow, Count: limit, Period: time.Hour}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := commandCalls(t, srv, "evalsha", "eval")
	admitted := hammerCtx(t, ctx, lims, "k", 64, 40)
	calls := commandCalls(t, srv, "evalsha", "eval") - before
	wantGathered(t, admitted, limit, 2*64*40, calls)
}

// TestCoalescedTakeEndsAtItsDeadline pauses Redis with both of a store's
// calls in flight, made by callers that give up once two more takes have
// queued: one whose deadline falls soon after and one without a deadline,
// in either order. Once the first callers give up the queue goes to Redis
// as one call, which hangs until the store's Timeout (4s) after the older
// of the two arrived; the take with the deadline returns at its deadline,
// whether it leads the call or not, and the other is answered from the
// fallback when the call's Timeout ends. (Should the call fail at once
// instead, both are answered from the fallback before the deadline: the
// take with the deadline must in no case wait longer.)
func TestCoalescedTakeEndsAtItsDeadline(t *testing.T) {
	for _, leads := range []bool{true, false} {
		t.Run(fmt.Sprintf("leads=%v", leads), func(t *testing.T) {
			srv := redistest.Start(t)
			const timeout = 4 * time.Second
			store := open(t, redisstore.Options{URL: srv.URL(), Timeout: timeout, DenyCache: -1, BreakerThreshold: 1000})
			p := policy(t, "p", sluice.Limit{Algorithm: sluice.FixedWindow, Count: 1000, Period: time.Hour})
			ctx := context.Background()
			if _, err := store.Take(ctx, p, "warm", 1); err != nil {
				t.Fatal(err)
			}
			srv.Pause(t)
			defer srv.Resume(t)
			var wg sync.WaitGroup
			defer wg.Wait()
			fctx, giveUp := context.WithCancel(ctx)
			defer giveUp()
			for i := range 2 {
				wg.Go(func() { store.Take(fctx, p, fmt.Sprint("first", i), 1) })
			}
			eventually(t, 5*time.Second, func() bool { busy, _ := redisstore.Coalescing(store); return busy == 2 },
				func() string { return "the first two takes did not fill the store's calls" })

			const within = 700 * time.Millisecond
			type result struct {
				err  error
				d    sluice.Decision
				took time.Duration
			}
			short, other := make(chan result, 1), make(chan result, 1)
			take := func(key string, deadline bool, out chan<- result) {
				tctx := ctx
				if deadline {
					var cancel context.CancelFunc
					tctx, cancel = context.WithTimeout(ctx, within)
					defer cancel()
				}
				start := time.Now()
				d, err := store.Take(tctx, p, key, 1)
				out <- result{err, d, time.Since(start)}
			}
			queue := func(key string, deadline bool, out chan<- result, n int) {
				go take(key, deadline, out)
				eventually(t, 5*time.Second, func() bool { _, q := redisstore.Coalescing(store); return q == n },
					func() string { return key + " did not queue" })
			}
			if leads {
				queue("short", true, short, 1)
				queue("other", false, other, 2)
			} else {
				queue("other", false, other, 1)
				queue("short", true, short, 2)
			}
			giveUp() // the first callers go: their calls hand the queue on
			r := <-short
			early := r.err == nil && r.d.Degraded && r.took < within
			if !errors.Is(r.err, context.DeadlineExceeded) && !early {
				t.Errorf("take with a %v deadline: %+v, %v after %v; want context.DeadlineExceeded", within, r.d, r.err, r.took)
			}
			if r.took > within+500*time.Millisecond {
				t.Errorf("take with a %v deadline returned after %v, want at its deadline", within, r.took)
			}
			if early {
				t.Logf("the call failed at once: the take was answered from the fallback after %v", r.took)
			}
			r = <-other
			if r.err != nil || !r.d.Degraded {
				t.Errorf("take queued with it: %+v, %v; want a decision from the fallback", r.d, r.err)
			}
		})
	}
}
