package memstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// BenchmarkAllow measures Allow on the default store and clock
// (clock.Default, read every millisecond), for every algorithm and a
// two-limit policy: one hot key that every request hits, and 100,000 keys
// chosen at random; serially and in parallel on every P.
func BenchmarkAllow(b *testing.B) {
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("client-%016x", rand.Uint64())
	}
	shapes := []struct {
		name   string
		limits []sluice.Limit
	}{}
	for _, alg := range algorithms {
		shapes = append(shapes, struct {
			name   string
			limits []sluice.Limit
		}{alg.String(), []sluice.Limit{lim(alg, 1000, time.Second)}})
	}
	shapes = append(shapes, struct {
		name   string
		limits []sluice.Limit
	}{"gcra+fixed_window", []sluice.Limit{lim(sluice.GCRA, 1000, time.Second), lim(sluice.FixedWindow, 100_000, time.Hour)}})

	for _, sh := range shapes {
		for _, hot := range []bool{true, false} {
			name := sh.name + "/random100k"
			if hot {
				name = sh.name + "/hot"
			}
			b.Run(name, func(b *testing.B) {
				s := memstore.New(memstore.Options{})
				defer s.Close()
				l, err := sluice.New(s, "bench-"+name, sh.limits...)
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				for _, k := range keys { // every key exists: measure decisions, not inserts
					l.Allow(ctx, k)
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					k := keys[0]
					if !hot {
						k = keys[i%len(keys)]
						i += 7919 // a prime: visits every key, in no cache-friendly order
					}
					l.Allow(ctx, k)
				}
			})
			b.Run(name+"/parallel", func(b *testing.B) {
				s := memstore.New(memstore.Options{})
				defer s.Close()
				l, err := sluice.New(s, "bench-parallel-"+name, sh.limits...)
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				for _, k := range keys {
					l.Allow(ctx, k)
				}
				var seed atomic.Uint64
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					rng := rand.New(rand.NewPCG(seed.Add(1), 0))
					for pb.Next() {
						k := keys[0]
						if !hot {
							k = keys[rng.IntN(len(keys))]
						}
						l.Allow(ctx, k)
					}
				})
			})
		}
	}
}
