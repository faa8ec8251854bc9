package overrides_test

import (
	"context"
	"errors"
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
	s, err := overrides.NewMemory(overrides.Options{Store: store, Now: now.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Put(ctx, overrides.Entry{Client: "k1", Tier: "premium"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, overrides.Entry{Client: "k2", Limits: map[string]overrides.Limit{"api": {Algorithm: "gcra", Limit: 100, Period: "1m"}},
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

	for _, e := range []overrides.Entry{
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
		if err := s.Put(ctx, e); !errors.Is(err, overrides.ErrInvalid) {
			t.Errorf("Put(%+v): got %v, want ErrInvalid", e, err)
		}
	}
}

func TestRedisSetsSeeEachOthersChanges(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	sets := make([]*overrides.Set, 2)
	for i := range sets {
		store, err := redisstore.New(redisstore.Options{URL: srv.URL()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		s, err := overrides.NewRedis(overrides.Options{Store: store, Poll: 20 * time.Millisecond}, store.Client, "sluice")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { s.Run(rctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		sets[i] = s
	}
	if err := sets[0].Put(ctx, overrides.Entry{Client: "key/with spaces", Tier: "premium"}); err != nil {
		t.Fatal(err)
	}
	within := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	within("the other set sees the override", func() bool { return sets[1].Override("key/with spaces") != nil })
	if e, ok := sets[1].Get("key/with spaces"); !ok || e.Tier != "premium" {
		t.Errorf("the other set's entry: %+v, %v", e, ok)
	}
	if ok, err := sets[1].Delete(ctx, "key/with spaces"); !ok || err != nil {
		t.Fatalf("Delete: %v, %v", ok, err)
	}
	within("the first set sees the removal", func() bool { return sets[0].Override("key/with spaces") == nil })
}

// TestEndedOverridesLeaveRedis: an override whose until has passed is
// removed from Redis by the next refresh of a set that sees it ended,
// unless it was put again meanwhile; a descriptor override too.
func TestEndedOverridesLeaveRedis(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	store, err := redisstore.New(redisstore.Options{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	now := &fakeNow{t: t0}
	newSet := func() *overrides.Set {
		s, err := overrides.NewRedis(overrides.Options{Store: store, Now: now.Now}, store.Client, "sluice")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := newSet(), newSet()
	for _, e := range []overrides.Entry{{Client: "k1", Tier: "premium", Until: t0.Add(time.Hour)}, {Client: "k2", Tier: "premium", Until: t0.Add(time.Hour)}} {
		if err := a.Put(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	now.Add(time.Hour)
	// k2 is put again before b, which still holds the ended one, refreshes.
	if err := a.Put(ctx, overrides.Entry{Client: "k2", Tier: "enterprise", Until: now.Now().Add(time.Hour)}); err != nil {
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

	ds, err := overrides.NewDescriptorRedis(overrides.Options{Store: store, Now: now.Now}, store.Client, "sluice")
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
			srv := redistest.Start(t)
			ctx := context.Background()
			store, err := redisstore.New(redisstore.Options{URL: srv.URL()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { store.Close() })
			opts := overrides.Options{Store: store, Timeout: 100 * time.Millisecond}
			set, err := overrides.NewRedis(opts, store.Client, "sluice")
			if err != nil {
				t.Fatal(err)
			}
			dset, err := overrides.NewDescriptorRedis(opts, store.Client, "sluice")
			if err != nil {
				t.Fatal(err)
			}
			if err := set.Put(ctx, overrides.Entry{Client: "k", Tier: "premium"}); err != nil {
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
			for name, refresh := range map[string]func(context.Context) error{"Set": set.Refresh, "DescriptorSet": dset.Refresh} {
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
	s, err := overrides.NewMemory(overrides.Options{Store: store})
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
		if err := s.Put(context.Background(), overrides.Entry{Client: "key-" + strconv.Itoa(i), Tier: "premium"}); err != nil {
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
