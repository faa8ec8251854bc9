package redisstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// With Addrs naming a sentinel and MasterSet its master's name, or a URL
// naming the sentinel with ?master_set=, the store finds the master through
// the sentinel and decides there.
func TestSentinel(t *testing.T) {
	master := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, "mymaster", master)
	t.Run("options", func(t *testing.T) {
		testSentinel(t, master, redisstore.Options{Addrs: []string{sentinel.Addr}, MasterSet: "mymaster", Prefix: "sent1", Timeout: slow})
	})
	t.Run("url", func(t *testing.T) {
		testSentinel(t, master, redisstore.Options{URL: "redis://" + sentinel.Addr + "?master_set=mymaster", Prefix: "sent2", Timeout: slow})
	})
}

func testSentinel(t *testing.T, master *redistest.Server, opts redisstore.Options) {
	store := open(t, opts)
	lim := limiter(t, store, "p", sluice.Limit{Algorithm: sluice.GCRA, Count: 3, Period: time.Hour})
	for i := range 5 {
		d := allow(t, lim, "k")
		if d.Allowed != (i < 3) || d.Degraded {
			t.Errorf("request %d: got Allowed=%v Degraded=%v, want Allowed=%v Degraded=false", i, d.Allowed, d.Degraded, i < 3)
		}
	}
	var keys []string
	for _, k := range master.DoList(t, "KEYS", "*") {
		if strings.HasPrefix(k, opts.Prefix+":") {
			keys = append(keys, k)
		}
	}
	if len(keys) != 1 {
		t.Errorf("keys on the master: got %q, want one", keys)
	}
}
