package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// slow is the Timeout of stores in tests about what Redis decides: the
// first decisions of a new client on a loaded 2-core machine under -race take
// up to ~50ms, the default Timeout, and a degraded decision would fail them.
// Latency under failure is tested with short Timeouts elsewhere.
const slow = 5 * time.Second

// Several processes sharing one limit through Redis must admit exactly what
// one process would: the script decides and charges atomically, so no race
// between instances lets an extra request through. Each instance is its own
// store with its own client; each hammers one key from many goroutines.
func TestExactAcrossInstances(t *testing.T) {
	single := redistest.Start(t)
	nodes := redistest.StartCluster(t, 3)
	targets := []struct {
		name string
		url  string
	}{
		{"single", "redis://" + single.Addr},
		{"cluster", clusterURL(nodes)},
	}
	cases := []struct {
		limit sluice.Limit
		want  int // admitted at one frozen instant from a fresh key
	}{
		{sluice.Limit{Algorithm: sluice.FixedWindow, Count: 40, Period: time.Second}, 40},
		{sluice.Limit{Algorithm: sluice.SlidingWindow, Count: 40, Period: time.Second}, 40},
		{sluice.Limit{Algorithm: sluice.SlidingLog, Count: 40, Period: time.Second}, 40},
		{sluice.Limit{Algorithm: sluice.GCRA, Count: 10, Period: time.Second, Burst: 30}, 30},
		{sluice.Limit{Algorithm: sluice.TokenBucket, Count: 10, Period: time.Second, Burst: 30}, 30},
	}
	// Clock steps between rounds: below, at and across window and refill
	// boundaries, with odd microseconds.
	steps := []time.Duration{
		250 * time.Millisecond, 100 * time.Millisecond, 650*time.Millisecond + 3*time.Microsecond,
		time.Second, 37 * time.Millisecond, 2500 * time.Millisecond, 999999 * time.Microsecond,
	}
	const instances, workers, perWorker = 3, 6, 4 // 72 requests a round
	for _, tg := range targets {
		for ci, c := range cases {
			t.Run(tg.name+"/"+c.limit.String(), func(t *testing.T) {
				clk := clock.NewFake(epoch)
				cached := make([]*sluice.Limiter, instances)
				uncached := make([]*sluice.Limiter, instances)
				name := fmt.Sprintf("exact-%s-%d", tg.name, ci)
				for i := range instances {
					cached[i] = limiter(t, open(t, redisstore.Options{URL: tg.url, Clock: clk, Timeout: slow}), name, c.limit)
					uncached[i] = limiter(t, open(t, redisstore.Options{URL: tg.url, Clock: clk, Timeout: slow, DenyCache: -1}), name, c.limit)
				}
				sets := []struct {
					cache string
					lims  []*sluice.Limiter
				}{{"on", cached}, {"off", uncached}}

				// Frozen: exactly the limit or the burst.
				for _, set := range sets {
					if got := hammer(t, set.lims, "frozen-"+set.cache, workers, perWorker); got != c.want {
						t.Errorf("frozen clock, deny cache %s: admitted %d, want %d", set.cache, got, c.want)
					}
				}

				// Moving: every round at one instant admits exactly what one
				// sequential caller would, per package algo's Go code
				// (memstore) at the same times.
				ref := memstore.New(memstore.Options{Clock: clk, SweepInterval: -1})
				defer ref.Close()
				model := limiter(t, ref, name, c.limit)
				total, wantTotal := map[string]int{}, 0
				for round, step := range append([]time.Duration{0}, steps...) {
					clk.Advance(step)
					want := 0
					for allow(t, model, "moving").Allowed {
						want++
					}
					if want >= instances*workers*perWorker {
						t.Fatalf("round %d: the model admits %d, as many as the round sends: the test cannot tell", round, want)
					}
					wantTotal += want
					for _, set := range sets {
						got := hammer(t, set.lims, "moving-"+set.cache, workers, perWorker)
						if got != want {
							t.Errorf("round %d (clock +%v), deny cache %s: admitted %d, want %d", round, clk.Now().Sub(epoch), set.cache, got, want)
						}
						total[set.cache] += got
					}
				}
				for _, set := range sets {
					if total[set.cache] != wantTotal {
						t.Errorf("over %d rounds, deny cache %s: admitted %d, want %d", len(steps)+1, set.cache, total[set.cache], wantTotal)
					}
				}
			})
		}
	}
}

// A policy of several limits on a cluster: its keys share one hash slot, so
// the script never fails with CROSSSLOT, and a request is charged to every
// limit or to none. The second limit denies while the first would admit; if
// the denied requests were charged to the first, the round after the
// minute's window ends would admit fewer.
func TestMultiLimitOnCluster(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	limits := []sluice.Limit{
		{Algorithm: sluice.GCRA, Count: 10, Period: time.Second},
		{Algorithm: sluice.FixedWindow, Count: 20, Period: time.Minute},
		{Algorithm: sluice.SlidingLog, Count: 25, Period: time.Minute},
	}
	clk := clock.NewFake(epoch)
	var lims []*sluice.Limiter
	for range 3 {
		lims = append(lims, limiter(t, open(t, redisstore.Options{URL: clusterURL(nodes), Clock: clk, Timeout: slow}), "multi", limits...))
	}
	ref := memstore.New(memstore.Options{Clock: clk, SweepInterval: -1})
	defer ref.Close()
	model := limiter(t, ref, "multi", limits...)
	rounds := []struct {
		at   time.Duration // since epoch
		want int
	}{
		{58 * time.Second, 10},                      // the burst of the 10/s limit
		{59 * time.Second, 10},                      // refilled: the 20/min window is full now
		{59*time.Second + 900*time.Millisecond, 0},  // 10/s would admit 9; 20/min denies
		{60 * time.Second, 5},                       // new minute, 10/s full: 25/min binds
		{61 * time.Second, 0},                       // sliding log: 25 in the last minute
		{118*time.Second + time.Microsecond, 10},    // the first 10 left the log
		{119*time.Second + 500*time.Millisecond, 5}, // 20/min binds again
	}
	for _, r := range rounds {
		clk.Set(epoch.Add(r.at))
		want := 0
		for allow(t, model, "entity").Allowed {
			want++
		}
		if want != r.want {
			t.Fatalf("at +%v: the model admits %d, the test expects %d: fix the table", r.at, want, r.want)
		}
		if got := hammer(t, lims, "entity", 5, 4); got != r.want {
			t.Errorf("at +%v: admitted %d, want %d", r.at, got, r.want)
		}
	}
	// The decision the model and Redis make next agree in every field.
	got, err := lims[0].Peek(context.Background(), "entity")
	if err != nil {
		t.Fatal(err)
	}
	want, err := model.Peek(context.Background(), "entity")
	if err != nil {
		t.Fatal(err)
	}
	if got.Allowed != want.Allowed || got.Remaining != want.Remaining || got.Index != want.Index || !roundedUp(got.RetryAfter, want.RetryAfter) {
		t.Errorf("peek: got %+v, want %+v", got, want)
	}
}
