package overrides_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/descriptor"
	"github.com/sluicehq/sluice/internal/overrides"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeNow) Now() time.Time      { f.mu.Lock(); defer f.mu.Unlock(); return f.t }
func (f *fakeNow) Add(d time.Duration) { f.mu.Lock(); f.t = f.t.Add(d); f.mu.Unlock() }

func TestMemorySet(t *testing.T) {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	now := &fakeNow{t: t0}
	s, err := overrides.NewClients(overrides.Options{Store: store, Now: now.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Put(ctx, overrides.Client{Client: "k1", Tier: "premium"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, overrides.Client{Client: "k2", Limits: map[string]overrides.Limit{"api": {Algorithm: "gcra", Limit: 100, Period: "1m"}},
		Until: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if co := s.Override("k1"); co == nil || co.Override().Tier != "premium" {
		t.Errorf("Override(k1) = %v, want tier premium", co)
	}
	if co := s.Override("k2"); co == nil || co.Override().Limits["api"].Count != 100 {
		t.Errorf("Override(k2) = %v, want its own limit of 100", co)
	}
	if l := s.List(); len(l) != 2 || l[0].Client != "k1" || l[1].Client != "k2" {
		t.Errorf("List = %+v", l)
	}
	// An override ends at its until.
	now.Add(time.Hour)
	if co := s.Override("k2"); co != nil {
		t.Error("Override(k2) after its until: still applies")
	}
	if n := s.Len(); n != 1 {
		t.Errorf("Len after k2 ended = %d, want 1", n)
	}
	if ok, err := s.Delete(ctx, "k1"); !ok || err != nil {
		t.Errorf("Delete(k1) = %v, %v", ok, err)
	}
	if ok, _ := s.Delete(ctx, "k1"); ok {
		t.Error("Delete(k1) twice reported true")
	}
	if s.Override("k1") != nil {
		t.Error("Override(k1) after Delete")
	}

	for _, e := range []overrides.Client{
		{Client: "", Tier: "x"},
		{Client: "k", Tier: ""},
		{Client: "k\n", Tier: "x"},
		{Client: "k", Tier: "bad tier"},
		{Client: "k", Tier: "x", Until: now.Now().Add(-time.Second)},
		{Client: "k", Limits: map[string]overrides.Limit{"api": {Algorithm: "gcra", Limit: 0, Period: "1m"}}},
		{Client: "k", Limits: map[string]overrides.Limit{"api": {Algorithm: "leaky", Limit: 1, Period: "1m"}}},
		{Client: "k", Limits: map[string]overrides.Limit{"api": {Algorithm: "gcra", Limit: 1, Period: "soon"}}},
		{Client: "k", Limits: map[string]overrides.Limit{"api": {Algorithm: "gcra", Limit: 1 << 62, Period: "1ns"}}},
	} {
		if _, err := s.Put(ctx, e); !errors.Is(err, overrides.ErrInvalid) {
			t.Errorf("Put(%+v): got %v, want ErrInvalid", e, err)
		}
	}
}

// startRedis starts a Redis server for the test, and a store on it.
func startRedis(t *testing.T) (*redistest.Server, *redisstore.Store) {
	t.Helper()
	srv := redistest.Start(t)
	store, err := redisstore.New(redisstore.Options{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return srv, store
}

func TestRedisSetsSeeEachOthersChanges(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	sets := make([]*overrides.Clients, 2)
	polls := make([]*handPoller, 2)
	for i := range sets {
		store, err := redisstore.New(redisstore.Options{URL: srv.URL()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		o := overrides.Options{Store: store, Redis: store.Client, Prefix: "sluice"}
		polls[i] = pollByHand(&o)
		s, err := overrides.NewClients(o)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		run(t, s)
		sets[i] = s
	}
	if _, err := sets[0].Put(ctx, overrides.Client{Client: "key/with spaces", Tier: "premium"}); err != nil {
		t.Fatal(err)
	}
	if sets[1].Override("key/with spaces") != nil {
		t.Fatal("the other set has the override before a poll")
	}
	polls[1].poll(t)
	if sets[1].Override("key/with spaces") == nil {
		t.Fatal("after a poll, the other set does not see the override")
	}
	if e, ok := sets[1].Get("key/with spaces"); !ok || e.Tier != "premium" {
		t.Errorf("the other set's entry: %+v, %v", e, ok)
	}
	if ok, err := sets[1].Delete(ctx, "key/with spaces"); !ok || err != nil {
		t.Fatalf("Delete: %v, %v", ok, err)
	}
	if sets[0].Override("key/with spaces") == nil {
		t.Fatal("the first set lost the override before a poll")
	}
	polls[0].poll(t)
	if sets[0].Override("key/with spaces") != nil {
		t.Fatal("after a poll, the first set still sees the override removed")
	}
}

// handPoller is what a Set's Run waits on, ticked by hand: Run refreshes
// the Set when poll says, and poll returns once the refresh is done.
type handPoller struct {
	ticks chan time.Time
	done  chan error
}

// pollByHand makes the Set that o builds poll only when the returned
// poller's poll is called.
func pollByHand(o *overrides.Options) *handPoller {
	h := &handPoller{ticks: make(chan time.Time), done: make(chan error, 1)}
	o.After = func(time.Duration) <-chan time.Time { return h.ticks }
	o.OnRefresh = func(err error) { h.done <- err }
	return h
}

// poll makes Run refresh the Set once and waits until it has, failing t if
// the refresh failed.
func (h *handPoller) poll(t *testing.T) {
	t.Helper()
	safeguard := time.After(30 * time.Second) // against a hang, never a wait for time to pass
	select {
	case h.ticks <- time.Now():
	case <-safeguard:
		t.Fatal("the set's Run is not polling")
	}
	select {
	case err := <-h.done:
		if err != nil {
			t.Fatalf("the poll's refresh: %v", err)
		}
	case <-safeguard:
		t.Fatal("the set's Run did not finish its refresh")
	}
}

// run runs s.Run until t ends.
func run(t *testing.T, s interface{ Run(context.Context) }) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestEndedOverridesLeaveRedis: an override whose until has passed is
// removed from Redis by the next refresh of a set that sees it ended,
// unless it was put again meanwhile; a descriptor override too.
func TestEndedOverridesLeaveRedis(t *testing.T) {
	srv, store := startRedis(t)
	ctx := context.Background()
	now := &fakeNow{t: t0}
	newSet := func() *overrides.Clients {
		s, err := overrides.NewClients(overrides.Options{Store: store, Now: now.Now, Redis: store.Client, Prefix: "sluice"})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := newSet(), newSet()
	for _, e := range []overrides.Client{{Client: "k1", Tier: "premium", Until: t0.Add(time.Hour)}, {Client: "k2", Tier: "premium", Until: t0.Add(time.Hour)}} {
		if _, err := a.Put(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	now.Add(time.Hour)
	// k2 is put again before b, which still holds the ended one, refreshes.
	if _, err := a.Put(ctx, overrides.Client{Client: "k2", Tier: "enterprise", Until: now.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := b.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	const hash = "sluice:{overrides}"
	if got := srv.Do(t, "HEXISTS", hash, "k1"); got != "0" {
		t.Errorf("the ended k1 is still in Redis (HEXISTS %s)", got)
	}
	if got := srv.Do(t, "HEXISTS", hash, "k2"); got != "1" {
		t.Errorf("k2, put again, was removed (HEXISTS %s)", got)
	}
	if co := b.Override("k2"); co == nil || co.Override().Tier != "enterprise" {
		t.Errorf("b's k2 after the refresh: %v, want tier enterprise", co)
	}

	ds, err := overrides.NewDescriptors(overrides.Options{Store: store, Now: now.Now, Redis: store.Client, Prefix: "sluice"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := ds.Put(ctx, overrides.Descriptor{Domain: "api", Entries: []descriptor.Entry{{Key: "client", Value: "a"}},
		Limits: []overrides.Limit{{Algorithm: "gcra", Limit: 100, Period: "1m"}}, Until: now.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	const dhash = "sluice:{overrides}:descriptors"
	if got := srv.Do(t, "HEXISTS", dhash, d.ID); got != "1" {
		t.Fatalf("the descriptor override %s is not in Redis (HEXISTS %s)", d.ID, got)
	}
	now.Add(time.Minute)
	if err := ds.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := srv.Do(t, "HEXISTS", dhash, d.ID); got != "0" {
		t.Errorf("the ended descriptor override %s is still in Redis (HEXISTS %s)", d.ID, got)
	}
}

// A Refresh while Redis is away fails within Options.Timeout, for both
// kinds of set, keeping the overrides last read: the client retries reads
// until their context ends, so an unbounded poll would wait out the whole
// outage, silently. Redis is stopped (connections refused) and paused
// (connections accepted, nothing answered).
func TestRefreshWithinTimeoutWhileRedisIsAway(t *testing.T) {
	for _, away := range []string{"stopped", "paused"} {
		t.Run(away, func(t *testing.T) {
			srv, store := startRedis(t)
			ctx := context.Background()
			opts := overrides.Options{Store: store, Timeout: 100 * time.Millisecond, Redis: store.Client, Prefix: "sluice"}
			set, err := overrides.NewClients(opts)
			if err != nil {
				t.Fatal(err)
			}
			dset, err := overrides.NewDescriptors(opts)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := set.Put(ctx, overrides.Client{Client: "k", Tier: "premium"}); err != nil {
				t.Fatal(err)
			}
			if err := dset.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if away == "stopped" {
				srv.Stop()
			} else {
				srv.Pause(t)
				t.Cleanup(func() { srv.Resume(t) })
			}
			for name, refresh := range map[string]func(context.Context) error{"Clients": set.Refresh, "Descriptors": dset.Refresh} {
				done := make(chan error, 1)
				go func() { done <- refresh(ctx) }()
				select {
				case err := <-done:
					if err == nil {
						t.Errorf("%s.Refresh with Redis %s: nil error, want a failure", name, away)
					}
				case <-time.After(30 * time.Second): // a safeguard: the Timeout is 100ms
					t.Fatalf("%s.Refresh with Redis %s: still waiting after 30s, want a failure within the 100ms Timeout", name, away)
				}
			}
			if e, ok := set.Get("k"); !ok || e.Tier != "premium" {
				t.Errorf("after the failed refresh: %+v, %v; want the override last read", e, ok)
			}
		})
	}
}

// BenchmarkClientOverride measures the gateway's lookup of a client's
// override, once for every request that matches a rule: with no
// overrides, with 1000 for other clients, and for a client with one.
func BenchmarkClientOverride(b *testing.B) {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	s, err := overrides.NewClients(overrides.Options{Store: store})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("none", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s.Override("someone")
		}
	})
	for i := range 1000 {
		if _, err := s.Put(context.Background(), overrides.Client{Client: "key-" + strconv.Itoa(i), Tier: "premium"}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("others", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s.Override("someone")
		}
	})
	b.Run("own", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if s.Override("key-500") == nil {
				b.Fatal("no override of key-500")
			}
		}
	})
}

// TestRedisLayout holds the keys and the stored form of both kinds of
// override to those Sluice has always written: a fleet that upgrades keeps
// its overrides, and processes of two releases read each other's changes.
func TestRedisLayout(t *testing.T) {
	srv, store := startRedis(t)
	ctx := context.Background()
	opts := overrides.Options{Store: store, Redis: store.Client} // the default prefix, sluice
	clients, err := overrides.NewClients(opts)
	if err != nil {
		t.Fatal(err)
	}
	descs, err := overrides.NewDescriptors(opts)
	if err != nil {
		t.Fatal(err)
	}
	until := time.Date(2999, 1, 2, 3, 4, 5, 0, time.UTC)
	if _, err := clients.Put(ctx, overrides.Client{Client: "k/1", Tier: "premium", Anchor: "15T09:00", Until: until,
		Limits: map[string]overrides.Limit{"api": {Algorithm: "gcra", Limit: 100, Period: "1m", Burst: 5}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := descs.Put(ctx, overrides.Descriptor{Domain: "api", Entries: entries("client", "a/b"), Until: until,
		Limits: []overrides.Limit{{Algorithm: "fixed_window", Limit: 10, Period: "day", Timezone: "Europe/Berlin"}}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ hash, id, stored string }{
		{"sluice:{overrides}", "k/1",
			`{"client":"k/1","tier":"premium","limits":{"api":{"algorithm":"gcra","limit":100,"period":"1m","burst":5}},"until":"2999-01-02T03:04:05Z","anchor":"15T09:00"}`},
		{"sluice:{overrides}:descriptors", "api/client=a%2Fb",
			`{"id":"api/client=a%2Fb","domain":"api","entries":[{"key":"client","value":"a/b"}],"limits":[{"algorithm":"fixed_window","limit":10,"period":"day","timezone":"Europe/Berlin"}],"until":"2999-01-02T03:04:05Z"}`},
	} {
		if got := srv.DoList(t, "HGETALL", tc.hash); !slices.Equal(got, []string{tc.id, tc.stored}) {
			t.Errorf("HGETALL %s: got %q, want %q", tc.hash, got, []string{tc.id, tc.stored})
		}
		if got := srv.Do(t, "GET", tc.hash+":version"); got != "1" {
			t.Errorf("GET %s:version: got %q, want 1", tc.hash, got)
		}
	}

	// Another process writes an entry of each kind.
	srv.Do(t, "HSET", "sluice:{overrides}", "k2", `{"client":"k2","tier":"enterprise"}`)
	srv.Do(t, "INCR", "sluice:{overrides}:version")
	srv.Do(t, "HSET", "sluice:{overrides}:descriptors", "api/client=c",
		`{"id":"api/client=c","domain":"api","entries":[{"key":"client","value":"c"}],"limits":[{"algorithm":"gcra","limit":7,"period":"1m"}]}`)
	srv.Do(t, "INCR", "sluice:{overrides}:descriptors:version")
	for _, refresh := range []func(context.Context) error{clients.Refresh, descs.Refresh} {
		if err := refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if co := clients.Override("k2"); co == nil || co.Override().Tier != "enterprise" {
		t.Errorf("the client override another process wrote: %v, want tier enterprise", co)
	}
	if m, ok := descs.Override("api", entries("client", "c")); !ok || m.Rule.Policy.Limits()[0].Count != 7 {
		t.Errorf("the descriptor override another process wrote: %+v, %v; want 7 a minute", m, ok)
	}
	if n := clients.Len() + descs.Len(); n != 4 {
		t.Errorf("%d overrides in force, want 4", n)
	}
}
