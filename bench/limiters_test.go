package bench

import (
	"context"
	"sync"
	"time"

	"github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	throttledmem "github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// quota is the rate every limiter under test is configured with: count
// requests per period, with bursts of up to count.
type quota struct {
	name   string
	count  int64
	period time.Duration
}

var quotas = []quota{
	// admit is a burst of 10^8 that no workload exhausts during a
	// limiter's life (each benchmark run builds a fresh one and makes at
	// most a few tens of millions of decisions), so every decision admits
	// and charges: the path a healthy API takes. The long period is for
	// sethvargo/go-limiter, whose refill (v0.7.1) adds interval/tokens
	// tokens per elapsed interval and so is right only while tokens <=
	// sqrt(interval in ns); at 10^9 per second it would admit 10^9 in its
	// first second and nothing after. 10^8 per 365 days meets that bound
	// and is within Sluice's (a period of at most a year).
	{"admit", 100_000_000, 365 * 24 * time.Hour},
	// deny lets one request per key and minute through, and the warm-up
	// takes it, so that every timed decision is a denial (but for window
	// algorithms crossing a minute boundary): the path of a client, or a
	// flood, over its limit. A per-second limit would make the random-key
	// workload's mix of admits and denials depend on the benchmark's speed
	// and length.
	{"deny", 1, time.Minute},
}

// decider is one limiter under test, reduced to the question every HTTP
// middleware asks: may this key go ahead?
type decider interface {
	allow(ctx context.Context, key string) (bool, error)
	close()
}

type contender struct {
	name string
	new  func(q quota) (decider, error)
}

// contenders are listed Sluice first, so that benchstat tables read from
// the reference down.
var contenders = []contender{
	{"sluice-gcra", newSluice(sluice.GCRA)},
	{"sluice-token_bucket", newSluice(sluice.TokenBucket)},
	{"sluice-fixed_window", newSluice(sluice.FixedWindow)},
	{"sluice-sliding_window", newSluice(sluice.SlidingWindow)},
	{"xrate-map-mutex", newXRate},
	{"sethvargo", newSethvargo},
	{"ulule", newUlule},
	{"throttled", newThrottled},
}

// sluiceDecider is Sluice as its README shows it: the default memstore
// (64 shards, 1,000,000 keys, the coarse default clock) and one limit.
type sluiceDecider struct {
	store *memstore.Store
	lim   *sluice.Limiter
}

func newSluice(alg sluice.Algorithm) func(q quota) (decider, error) {
	return func(q quota) (decider, error) {
		store := memstore.New(memstore.Options{})
		lim, err := sluice.New(store, "bench", sluice.Limit{Algorithm: alg, Count: q.count, Period: q.period})
		if err != nil {
			store.Close()
			return nil, err
		}
		return &sluiceDecider{store, lim}, nil
	}
}

func (s *sluiceDecider) allow(ctx context.Context, key string) (bool, error) {
	d, err := s.lim.Allow(ctx, key)
	return d.Allowed, err
}

func (s *sluiceDecider) close() { s.store.Close() }

// xrateDecider is the pattern most Go services start with: one
// golang.org/x/time/rate.Limiter per key in a map under a mutex. It never
// forgets a key.
type xrateDecider struct {
	mu    sync.Mutex
	m     map[string]*rate.Limiter
	limit rate.Limit
	burst int
}

func newXRate(q quota) (decider, error) {
	return &xrateDecider{
		m:     make(map[string]*rate.Limiter),
		limit: rate.Limit(float64(q.count) / q.period.Seconds()),
		burst: int(q.count),
	}, nil
}

func (x *xrateDecider) allow(_ context.Context, key string) (bool, error) {
	x.mu.Lock()
	l, ok := x.m[key]
	if !ok {
		l = rate.NewLimiter(x.limit, x.burst)
		x.m[key] = l
	}
	x.mu.Unlock()
	return l.Allow(), nil
}

func (x *xrateDecider) close() {}

// sethvargoDecider is github.com/sethvargo/go-limiter's memorystore with its
// default sweep settings.
type sethvargoDecider struct{ store limiter.Store }

func newSethvargo(q quota) (decider, error) {
	st, err := memorystore.New(&memorystore.Config{Tokens: uint64(q.count), Interval: q.period})
	if err != nil {
		return nil, err
	}
	return &sethvargoDecider{st}, nil
}

func (s *sethvargoDecider) allow(ctx context.Context, key string) (bool, error) {
	_, _, _, ok, err := s.store.Take(ctx, key)
	return ok, err
}

func (s *sethvargoDecider) close() { s.store.Close(context.Background()) }

// ululeDecider is github.com/ulule/limiter/v3 on its memory store with its
// defaults (a fixed window per key, cleaned every 30 seconds).
type ululeDecider struct{ lim *ulule.Limiter }

func newUlule(q quota) (decider, error) {
	return &ululeDecider{ulule.New(ululemem.NewStore(), ulule.Rate{Period: q.period, Limit: q.count})}, nil
}

func (u *ululeDecider) allow(ctx context.Context, key string) (bool, error) {
	c, err := u.lim.Get(ctx, key)
	return !c.Reached, err
}

// close has nothing to do: ulule stops its cleaner from a finalizer.
func (u *ululeDecider) close() {}

// throttledDecider is github.com/throttled/throttled/v2's GCRA limiter on its
// memstore, capped like Sluice's default store at 1,000,000 keys (which
// makes it an LRU from hashicorp/golang-lru).
type throttledDecider struct{ lim *throttled.GCRARateLimiterCtx }

func newThrottled(q quota) (decider, error) {
	st, err := throttledmem.NewCtx(1_000_000)
	if err != nil {
		return nil, err
	}
	// throttled admits MaxBurst+1 at once; MaxRate is a spacing, so count
	// per period becomes one request every period/count.
	lim, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{
		MaxRate:  throttled.PerDuration(int(q.count), q.period),
		MaxBurst: int(q.count) - 1,
	})
	if err != nil {
		return nil, err
	}
	return &throttledDecider{lim}, nil
}

func (t *throttledDecider) allow(ctx context.Context, key string) (bool, error) {
	limited, _, err := t.lim.RateLimitCtx(ctx, key, 1)
	return !limited, err
}

func (t *throttledDecider) close() {}
