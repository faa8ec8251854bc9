package redisstore_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// hotKeyPolicy returns a policy of one limit of alg that is never reached,
// in mode m.
func hotKeyPolicy(b *testing.B, m sluice.SyncMode, alg sluice.Algorithm) *sluice.Policy {
	p, err := sluice.NewPolicy("bench", sluice.Limit{Algorithm: alg, Count: 1_000_000_000, Period: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	if p, err = p.WithSync(sluice.Sync{Mode: m}); err != nil {
		b.Fatal(err)
	}
	return p
}

// benchHotKey measures decisions on one hot key in mode m from parallel
// goroutines, reporting Redis calls per decision (the quota script's, or
// one per decision in exact mode). The limit is never reached.
func benchHotKey(b *testing.B, m sluice.SyncMode, alg sluice.Algorithm) {
	srv := redistest.Start(b)
	s, err := redisstore.New(redisstore.Options{URL: "redis://" + srv.Addr, Timeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	p := hotKeyPolicy(b, m, alg)
	ctx := context.Background()
	before := s.QuotaStats()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			d, err := s.Take(ctx, p, "hot", 1)
			if err != nil || !d.Allowed {
				b.Errorf("take: %+v, %v", d, err)
				return
			}
		}
	})
	b.StopTimer()
	calls := s.QuotaStats().Calls - before.Calls
	if m == sluice.SyncExact {
		calls = int64(b.N)
	}
	b.ReportMetric(float64(calls)/float64(b.N), "redis-calls/op")
}

func BenchmarkLeaseHotKey(b *testing.B) {
	for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.GCRA} {
		b.Run(alg.String(), func(b *testing.B) { benchHotKey(b, sluice.SyncLease, alg) })
	}
}

func BenchmarkAsyncHotKey(b *testing.B) {
	for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.GCRA} {
		b.Run(alg.String(), func(b *testing.B) { benchHotKey(b, sluice.SyncAsync, alg) })
	}
}

func BenchmarkExactHotKey(b *testing.B) {
	benchHotKey(b, sluice.SyncExact, sluice.GCRA)
}

// BenchmarkHotKeyLatency decides on one hot key from one goroutine in each
// mode, timing every decision, and reports the median and 99th percentile
// besides the mean (each timing adds two clock reads, tens of
// nanoseconds). A lease's decisions are local but for the one in many that
// takes the next lease, which the mean spreads over all and the median
// leaves out.
func BenchmarkHotKeyLatency(b *testing.B) {
	for _, bc := range []struct {
		m   sluice.SyncMode
		alg sluice.Algorithm
	}{{sluice.SyncLease, sluice.FixedWindow}, {sluice.SyncLease, sluice.GCRA}, {sluice.SyncAsync, sluice.GCRA}, {sluice.SyncExact, sluice.GCRA}} {
		b.Run(bc.m.String()+"/"+bc.alg.String(), func(b *testing.B) {
			srv := redistest.Start(b)
			s, err := redisstore.New(redisstore.Options{URL: "redis://" + srv.Addr, Timeout: 5 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			p := hotKeyPolicy(b, bc.m, bc.alg)
			ctx := context.Background()
			for range 1000 { // warm: the key turns hot and takes its first lease
				s.Take(ctx, p, "hot", 1)
			}
			lat := make([]time.Duration, 0, 1<<20)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				d, err := s.Take(ctx, p, "hot", 1)
				if len(lat) < cap(lat) {
					lat = append(lat, time.Since(start))
				}
				if err != nil || !d.Allowed {
					b.Fatalf("take: %+v, %v", d, err)
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			if len(lat) > 0 {
				b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
				b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
			}
		})
	}
}
