package redisstore_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/storetest"
)

// The Redis store passes the same conformance suite as the in-memory store,
// at its resolution of one microsecond, against a single server and against
// a cluster of three masters. Each subtest gets a store of its own (with its
// own key prefix) on one shared server.
func TestConformance(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		srv := redistest.Start(t)
		runSuite(t, redisstore.Options{URL: "redis://" + srv.Addr}, false)
	})
	t.Run("cluster", func(t *testing.T) {
		nodes := redistest.StartCluster(t, 3)
		runSuite(t, redisstore.Options{Addrs: []string{nodes[0].Addr, nodes[1].Addr, nodes[2].Addr}}, true)
	})
}

func runSuite(t *testing.T, base redisstore.Options, cluster bool) {
	n := 0
	storetest.RunWith(t, storetest.Options{Resolution: time.Microsecond, BatchesNotAtomic: cluster}, func(t *testing.T, clk *clock.Fake) sluice.Store {
		opts := base
		n++
		opts.Prefix = "conformance" + string(rune('a'+n%26)) + time.Now().Format("150405.000000000")
		opts.Clock = clk
		// The suite checks decisions, not latency: a loaded machine running
		// the race detector must not push a call onto the fallback path.
		opts.Timeout = 10 * time.Second
		s, err := redisstore.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}
