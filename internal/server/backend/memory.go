// The memory backend: the counters in the process.

package backend

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// memoryBackend keeps every limit's state in the process (memstore): it
// has no options of its own but store.max_keys, runs every valid limit
// and is always ready.
var memoryBackend = Backend{
	Name: "memory",
	Open: openMemory,
}

func openMemory(env Env, s Settings) (Opened, error) {
	m := memstore.New(memstore.Options{MaxKeys: s.MaxKeys, Clock: env.Clock})
	registerMemstore(env.Registry, m, "the in-memory store")
	return memoryStore{m}, nil
}

// memoryStore is the open memory backend.
type memoryStore struct{ s *memstore.Store }

func (m memoryStore) Store() sluice.Store         { return m.s }
func (m memoryStore) Ready(context.Context) error { return nil }
func (m memoryStore) Close() error                { return m.s.Close() }

// registerMemstore registers the metrics of an in-memory store, which is
// what describes it in their help texts.
func registerMemstore(reg prometheus.Registerer, s *memstore.Store, what string) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_live_keys",
			Help: "Entries held by " + what + ", one per limit per key.",
		}, func() float64 { return float64(s.Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_max_keys",
			Help: "The most entries " + what + " keeps (max_keys).",
		}, func() float64 { return float64(s.MaxKeys()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_evicted_keys_total",
			Help: "Entries " + what + " evicted to stay within max_keys while their state still mattered; while it rises, clients may get more than their limits.",
		}, func() float64 { return float64(s.Evicted()) }),
	)
}
