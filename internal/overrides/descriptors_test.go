package overrides_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/descriptor"
	"github.com/sluicehq/sluice/internal/overrides"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/rls"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

func entries(kv ...string) []descriptor.Entry {
	var es []descriptor.Entry
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, descriptor.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return es
}

func TestDescriptorID(t *testing.T) {
	for _, tc := range []struct {
		domain  string
		entries []descriptor.Entry
		want    string
	}{
		{"api", entries("client", "a"), "api/client=a"},
		{"api", entries("client", ""), "api/client="},
		{"a/b", entries("k=1", "v/2", "x", "%"), "a%2Fb/k%3D1=v%2F2/x=%25"},
		{"api", entries("k", "line\nbreak"), "api/k=line%0Abreak"},
	} {
		got := overrides.DescriptorID(tc.domain, tc.entries)
		if got != tc.want {
			t.Errorf("DescriptorID(%q, %v) = %q, want %q", tc.domain, tc.entries, got, tc.want)
		}
		d, es, err := overrides.ParseDescriptorID(got)
		if err != nil || d != tc.domain || !slices.Equal(es, tc.entries) {
			t.Errorf("ParseDescriptorID(%q) = %q, %v, %v; want %q, %v", got, d, es, err, tc.domain, tc.entries)
		}
	}
	for _, id := range []string{"", "api", "api/client", "api/client=%zz", "%zz/client=a"} {
		if _, _, err := overrides.ParseDescriptorID(id); !errors.Is(err, overrides.ErrInvalid) {
			t.Errorf("ParseDescriptorID(%q): got %v, want ErrInvalid", id, err)
		}
	}
}

// FuzzDescriptorID: parsing never panics, and an ID that parses names a
// descriptor whose ID parses back to the same descriptor.
func FuzzDescriptorID(f *testing.F) {
	for _, s := range []string{"api/client=a", "a%2Fb/k%3D1=v%2F2", "api/", "/=", "api/a=b=c/d=", "%"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		d, es, err := overrides.ParseDescriptorID(id)
		if err != nil {
			return
		}
		again := overrides.DescriptorID(d, es)
		d2, es2, err := overrides.ParseDescriptorID(again)
		if err != nil || d2 != d || !slices.Equal(es2, es) {
			t.Errorf("%q parses to %q %v, whose ID %q parses to %q %v, %v", id, d, es, again, d2, es2, err)
		}
	})
}

func TestDescriptorSet(t *testing.T) {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	now := &fakeNow{t: t0}
	s, err := overrides.NewDescriptors(overrides.Options{Store: store, Now: now.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, ok := s.Override("api", entries("client", "a")); ok {
		t.Error("Override on an empty set found one")
	}
	got, err := s.Put(ctx, overrides.Descriptor{Domain: "api", Entries: entries("client", "a"),
		Limits: []overrides.Limit{{Algorithm: "gcra", Limit: 100, Period: "1m"}}, Until: t0.Add(time.Hour)})
	if err != nil || got.ID != "api/client=a" {
		t.Fatalf("Put: %+v, %v", got, err)
	}
	if _, err := s.Put(ctx, overrides.Descriptor{Domain: "api", Entries: entries("client", "b", "path", "/x"),
		Limits: []overrides.Limit{{Algorithm: "fixed_window", Limit: 1, Period: "1s"}, {Algorithm: "fixed_window", Limit: 10, Period: "1m"}}}); err != nil {
		t.Fatal(err)
	}
	m, ok := s.Override("api", entries("client", "a"))
	if !ok || m.Rule.Policy.Name() != "api//admin" || m.Rule.Policy.Limits()[0].Count != 100 || m.Rule.MetricKey != "api.admin_override" {
		t.Errorf("Override(client=a) = %+v, %v; want the policy api//admin with 100", m, ok)
	}
	// Only these exact entries: not another value, not a prefix, not
	// another domain.
	for _, miss := range [][]descriptor.Entry{entries("client", "b"), entries("client", "a", "path", "/x"), entries("client", "")} {
		if _, ok := s.Override("api", miss); ok {
			t.Errorf("Override(%v) found one", miss)
		}
	}
	if _, ok := s.Override("other", entries("client", "a")); ok {
		t.Error("Override in another domain found one")
	}
	// Setting another keeps client a's as it was; changing a's rebuilds it.
	if _, err := s.Put(ctx, overrides.Descriptor{Domain: "api", Entries: entries("client", "c"),
		Limits: []overrides.Limit{{Algorithm: "gcra", Limit: 1, Period: "1m"}}}); err != nil {
		t.Fatal(err)
	}
	if again, _ := s.Override("api", entries("client", "a")); again.Rule != m.Rule {
		t.Error("setting another override rebuilt client a's")
	}
	if _, err := s.Put(ctx, overrides.Descriptor{Domain: "api", Entries: entries("client", "c"),
		Limits: []overrides.Limit{{Algorithm: "gcra", Limit: 2, Period: "1m"}}}); err != nil {
		t.Fatal(err)
	}
	if mc, _ := s.Override("api", entries("client", "c")); mc.Rule == nil || mc.Rule.Policy.Limits()[0].Count != 2 {
		t.Errorf("client c's changed override: %+v, want 2 a minute", mc.Rule)
	}
	if ok, err := s.Delete(ctx, "api/client=c"); !ok || err != nil {
		t.Fatalf("Delete(client=c) = %v, %v", ok, err)
	}
	mb, ok := s.Override("api", entries("client", "b", "path", "/x"))
	if !ok || mb.Rule.Policy.Len() != 2 || mb.Key == m.Key {
		t.Errorf("Override(client=b, path=/x) = %+v, %v; want two limits on a counter of its own", mb, ok)
	}
	if l := s.List(); len(l) != 2 || l[0].ID != "api/client=a" || l[1].ID != "api/client=b/path=%2Fx" {
		t.Errorf("List = %+v", l)
	}
	if d, ok := s.Get("api/client=b/path=%2Fx"); !ok || len(d.Limits) != 2 {
		t.Errorf("Get = %+v, %v", d, ok)
	}
	now.Add(time.Hour)
	if _, ok := s.Override("api", entries("client", "a")); ok {
		t.Error("Override(client=a) after its until: still applies")
	}
	if n := s.Len(); n != 1 {
		t.Errorf("Len after one ended = %d, want 1", n)
	}
	if ok, err := s.Delete(ctx, "api/client=b/path=%2Fx"); !ok || err != nil {
		t.Errorf("Delete = %v, %v", ok, err)
	}
	if ok, _ := s.Delete(ctx, "api/client=b/path=%2Fx"); ok {
		t.Error("Delete twice reported true")
	}

	for _, d := range []overrides.Descriptor{
		{Domain: "", Entries: entries("k", "v"), Limits: []overrides.Limit{{Algorithm: "gcra", Limit: 1, Period: "1m"}}},
		{Domain: "api", Limits: []overrides.Limit{{Algorithm: "gcra", Limit: 1, Period: "1m"}}},
		{Domain: "api", Entries: entries("", "v"), Limits: []overrides.Limit{{Algorithm: "gcra", Limit: 1, Period: "1m"}}},
		{Domain: "api", Entries: entries("k", "v")},
		{Domain: "api", Entries: entries("k", "v"), Limits: []overrides.Limit{{Algorithm: "gcra", Limit: 0, Period: "1m"}}},
		{Domain: "api", Entries: entries("k", "v"), Limits: []overrides.Limit{{Algorithm: "", Limit: 1, Period: "1m"}}},
		{Domain: "api", Entries: entries("k", "v"), Limits: []overrides.Limit{{Algorithm: "gcra", Limit: 1, Period: "1m"}}, Until: now.Now()},
		{Domain: "api", Entries: entries("k", strings.Repeat("v", overrides.MaxDescriptorIDLen)), Limits: []overrides.Limit{{Algorithm: "gcra", Limit: 1, Period: "1m"}}},
	} {
		if _, err := s.Put(ctx, d); !errors.Is(err, overrides.ErrInvalid) {
			t.Errorf("Put(%+v): got %v, want ErrInvalid", d, err)
		}
	}
}

// A descriptor without an override costs no allocation, whether or not
// others have one.
func TestDescriptorOverrideAllocs(t *testing.T) {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	s, err := overrides.NewDescriptors(overrides.Options{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	es := entries("client", "someone", "path", "/v1/things")
	if n := testing.AllocsPerRun(100, func() { s.Override("api", es) }); n != 0 {
		t.Errorf("Override with no overrides: %v allocations, want 0", n)
	}
	if _, err := s.Put(context.Background(), overrides.Descriptor{Domain: "api", Entries: entries("client", "a"),
		Limits: []overrides.Limit{{Algorithm: "gcra", Limit: 1, Period: "1m"}}}); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { s.Override("api", es) }); n != 0 {
		t.Errorf("Override of a descriptor without one: %v allocations, want 0", n)
	}
	a := entries("client", "a")
	if n := testing.AllocsPerRun(100, func() {
		if _, ok := s.Override("api", a); !ok {
			t.Fatal("no override of client a")
		}
	}); n != 0 {
		t.Errorf("Override of a descriptor with one: %v allocations, want 0", n)
	}
}

func BenchmarkDescriptorOverride(b *testing.B) {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	s, _ := overrides.NewDescriptors(overrides.Options{Store: store})
	es := entries("client", "someone")
	b.Run("none", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s.Override("api", es)
		}
	})
	s.Put(context.Background(), overrides.Descriptor{Domain: "api", Entries: entries("client", "a"),
		Limits: []overrides.Limit{{Algorithm: "gcra", Limit: 1, Period: "1m"}}})
	b.Run("others", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s.Override("api", es)
		}
	})
	for i := range 1000 {
		if _, err := s.Put(context.Background(), overrides.Descriptor{Domain: "api", Entries: entries("client", "key-"+strconv.Itoa(i), "path", "/v1/things"),
			Limits: []overrides.Limit{{Algorithm: "gcra", Limit: 1, Period: "1m"}}}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("many", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s.Override("api", es)
		}
	})
	own := entries("client", "key-500", "path", "/v1/things")
	b.Run("own", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := s.Override("api", own); !ok {
				b.Fatal("no override of key-500")
			}
		}
	})
}

func TestRedisDescriptorSetsSeeEachOthersChanges(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	sets := make([]*overrides.Descriptors, 2)
	polls := make([]*handPoller, 2)
	for i := range sets {
		store, err := redisstore.New(redisstore.Options{URL: srv.URL()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		o := overrides.Options{Store: store, Redis: store.Client, Prefix: "sluice"}
		polls[i] = pollByHand(&o)
		s, err := overrides.NewDescriptors(o)
		if err != nil {
			t.Fatal(err)
		}
		run(t, s)
		sets[i] = s
	}
	// The client overrides of the same Redis are another hash.
	store, _ := redisstore.New(redisstore.Options{URL: srv.URL()})
	defer store.Close()
	clients, _ := overrides.NewClients(overrides.Options{Store: store, Redis: store.Client, Prefix: "sluice"})
	if _, err := clients.Put(ctx, overrides.Client{Client: "api/client=a", Tier: "premium"}); err != nil {
		t.Fatal(err)
	}
	if _, err := sets[0].Put(ctx, overrides.Descriptor{Domain: "api", Entries: entries("client", "a b"),
		Limits: []overrides.Limit{{Algorithm: "gcra", Limit: 5, Period: "1m"}}}); err != nil {
		t.Fatal(err)
	}
	seen := func(i int) bool { _, ok := sets[i].Override("api", entries("client", "a b")); return ok }
	if seen(1) {
		t.Fatal("the other set has the override before a poll")
	}
	polls[1].poll(t)
	if !seen(1) {
		t.Fatal("after a poll, the other set does not see the override")
	}
	if n := sets[1].Len(); n != 1 {
		t.Errorf("the other set holds %d overrides, want 1 (client overrides are kept apart)", n)
	}
	if ok, err := sets[1].Delete(ctx, "api/client=a b"); !ok || err != nil {
		t.Fatalf("Delete: %v, %v", ok, err)
	}
	if !seen(0) {
		t.Fatal("the first set lost the override before a poll")
	}
	polls[0].poll(t)
	if seen(0) {
		t.Fatal("after a poll, the first set still sees the override removed")
	}
	if _, ok := clients.Get("api/client=a"); !ok {
		t.Error("the client override went with the descriptor's")
	}
}

// BenchmarkServiceDecide measures the rate-limit service's decision with
// descriptor overrides wired in: none at all, 1000 for other clients (the
// decision's descriptors have none: one map lookup each), and every
// client with one.
func BenchmarkServiceDecide(b *testing.B) {
	tree, err := descriptor.New(descriptor.Domain{Name: "bench", Descriptors: []descriptor.Descriptor{
		{Key: "remote_address", RateLimit: &descriptor.RateLimit{RequestsPerUnit: 1e9, Unit: descriptor.Second}},
		{Key: "path", Value: "/api", RateLimit: &descriptor.RateLimit{RequestsPerUnit: 1e9, Unit: descriptor.Second}},
	}})
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]*rlsv3.RateLimitRequest, 1000)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0." + strconv.Itoa(i)}}},
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "path", Value: "/api"}}},
		}}
	}
	for _, bc := range []struct {
		name   string
		prefix string // the clients given overrides; "" for none
	}{{"none", ""}, {"others", "10.1.0."}, {"own", "10.0.0."}} {
		b.Run(bc.name, func(b *testing.B) {
			store := memstore.New(memstore.Options{})
			defer store.Close()
			set, err := overrides.NewDescriptors(overrides.Options{Store: store})
			if err != nil {
				b.Fatal(err)
			}
			for i := range 1000 {
				if bc.prefix == "" {
					break
				}
				if _, err := set.Put(context.Background(), overrides.Descriptor{Domain: "bench", Entries: entries("remote_address", bc.prefix+strconv.Itoa(i)),
					Limits: []overrides.Limit{{Algorithm: "fixed_window", Limit: 1e9, Period: "1s"}}}); err != nil {
					b.Fatal(err)
				}
			}
			svc, err := rls.New(rls.Options{Store: store, Rules: tree, Overrides: set})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					resp, err := svc.Decide(context.Background(), reqs[i%len(reqs)])
					if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
						b.Fatalf("%v %v", resp, err)
					}
					i++
				}
			})
		})
	}
}
