package memstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// BenchmarkLease measures an Acquire and its Release, one lease per unit
// of work: on one hot key, and on 10,000 keys, in parallel on every P.
func BenchmarkLease(b *testing.B) {
	for _, keys := range []int{1, 10_000} {
		b.Run("keys="+strconv.Itoa(keys), func(b *testing.B) {
			s := memstore.New(memstore.Options{})
			defer s.Close()
			c, err := sluice.NewConcurrency(s, "bench", sluice.MaxConcurrency, time.Minute)
			if err != nil {
				b.Fatal(err)
			}
			names := make([]string, keys)
			for i := range names {
				names[i] = "client-" + strconv.Itoa(i)
			}
			var next atomic.Int64
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l, d, err := c.Acquire(ctx, names[int(next.Add(1))%keys])
					if err != nil || !d.Allowed {
						b.Fatalf("Acquire: %+v, %v", d, err)
					}
					l.Release(ctx)
				}
			})
		})
	}
}
