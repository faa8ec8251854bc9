package descriptor_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/descriptor"
)

// benchTree is a realistic tree: per-IP limits with a few hundred
// exceptions, per-path limits with wildcards, and per-tenant/per-user
// limits two levels deep.
func benchTree() descriptor.Domain {
	var ds []descriptor.Descriptor
	ds = append(ds, descriptor.Descriptor{Key: "remote_address", RateLimit: rl(100, descriptor.Second)})
	for i := range 300 {
		ds = append(ds, descriptor.Descriptor{Key: "remote_address", Value: fmt.Sprintf("10.0.%d.%d", i/256, i%256), RateLimit: rl(1000, descriptor.Second)})
	}
	for i := range 20 {
		ds = append(ds, descriptor.Descriptor{Key: "path", Value: fmt.Sprintf("/api/v1/service%d/*", i), RateLimit: rl(50, descriptor.Minute)})
	}
	ds = append(ds, descriptor.Descriptor{Key: "path", RateLimit: rl(10, descriptor.Minute)})
	var plans []descriptor.Descriptor
	for _, p := range []string{"free", "pro", "enterprise"} {
		plans = append(plans, descriptor.Descriptor{Key: "plan", Value: p, Descriptors: []descriptor.Descriptor{
			{Key: "user", RateLimit: rl(60, descriptor.Minute)},
		}})
	}
	ds = append(ds, descriptor.Descriptor{Key: "tenant", Descriptors: plans})
	return descriptor.Domain{Name: "edge", Descriptors: ds}
}

func BenchmarkMatch(b *testing.B) {
	s := mustNew(b, benchTree())
	cases := []struct {
		name    string
		entries []descriptor.Entry
	}{
		{"exact", e("remote_address", "10.0.1.7")},
		{"default", e("remote_address", "192.0.2.1")},
		{"wildcard", e("path", "/api/v1/service17/orders/42")},
		{"wildcard miss to default", e("path", "/"+strings.Repeat("x", 40))},
		{"three levels", e("tenant", "acme", "plan", "pro", "user", "u-123")},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if m := s.Match("edge", c.entries); m.Rule == nil {
					b.Fatal("no match")
				}
			}
		})
	}
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if m := s.Match("edge", cases[i%len(cases)].entries); m.Rule == nil {
					b.Error("no match")
				}
				i++
			}
		})
	})
}

// TestMatchAllocations holds Match to its promise: no allocation unless two
// or more levels are counted per value, and then one.
func TestMatchAllocations(t *testing.T) {
	s := mustNew(t, benchTree())
	for _, es := range [][]descriptor.Entry{
		e("remote_address", "10.0.1.7"), e("remote_address", "192.0.2.1"),
		e("path", "/api/v1/service17/orders/42"), e("path", "/"+strings.Repeat("x", 40)),
	} {
		if n := testing.AllocsPerRun(100, func() { s.Match("edge", es) }); n != 0 {
			t.Errorf("%v: %v allocations, want 0", es, n)
		}
	}
	es := e("tenant", "acme", "plan", "pro", "user", "u-123") // tenant and user counted per value
	if n := testing.AllocsPerRun(100, func() { s.Match("edge", es) }); n != 1 {
		t.Errorf("%v: %v allocations, want 1", es, n)
	}
}
