// Package backend is the table of the stores `sluice serve` can run on:
// the values of store.backend. The config loader decodes and checks a
// store section with it, and the server opens the store with it; neither
// asks which backend it has.
//
// Each backend is one Backend in the table below, its adapter in a file
// of this package of its own (memory.go, redis.go): its name, how its
// section of the config file is decoded and its files read, which limits
// it can run, and how it opens. What only some backends can do, the
// server asks of the opened backend through the interfaces Shared,
// Degradable and KeyHasher.
package backend

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"
	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// backends are the values of store.backend, in the order messages list
// them. A new backend is its file in this package and one line here.
var backends = []Backend{
	memoryBackend,
	redisBackend,
}

// Default is the backend of a config file without store.backend.
const Default = "memory"

// Lookup returns the backend that store.backend calls name.
func Lookup(name string) (Backend, bool) {
	for _, b := range backends {
		if b.Name == name {
			return b, true
		}
	}
	return Backend{}, false
}

// All returns every backend, in the order messages list them. The slice
// is the caller's.
func All() []Backend { return append([]Backend(nil), backends...) }

// Choices lists the backends' names for a message, in the table's order:
// "memory or redis", "memory, redis or NAME".
func Choices() string {
	names := make([]string, len(backends))
	for i, b := range backends {
		names[i] = b.Name
	}
	return orList(names)
}

// Sharing lists the Shared backends for a message, as Choices does: what
// they share state through ("Redis", their Titles) and their names
// ("redis").
func Sharing() (titles, names string) {
	var ts, ns []string
	for _, b := range backends {
		if b.Shared {
			ts, ns = append(ts, b.Title), append(ns, b.Name)
		}
	}
	return orList(ts), orList(ns)
}

// Backend is one backend of the table: everything the config loader and
// the server need to know of it. Only Name and Open are required.
type Backend struct {
	// Name is store.backend's value for the backend, and the key of its
	// own section of options, store.<Name>.
	Name string
	// Title names what a Shared backend's state lives in, for messages:
	// "Redis". Unused for other backends.
	Title string
	// Shared tells that every process on the backend shares its state:
	// Open returns a Shared. The config loader lets only a shared backend
	// run a fleet limit (rules[].adaptive.fleet), which spans every
	// gateway on the store.
	Shared bool

	// Sections are the mappings of the backend's options, store.<Name>
	// first and then those within it, each with its fields as
	// docs/config.md documents them (a test holds the document to them).
	// Decode walks them with Decoder.Fields. None for a backend without
	// options.
	Sections []Section
	// Decode decodes store.<Name>, the node n, into s, reporting each
	// problem through d at its line. It is called whenever the file has
	// the section, whichever backend the file chooses (a section of
	// another backend's is then a problem too). Nil when Sections is.
	Decode func(d Decoder, n *yaml.Node, s *Settings)
	// Needs says what store.<Name> must give when the backend is chosen
	// and the file has no such section: "a url, or addrs for a cluster
	// or Sentinel" is reported as "store.redis: missing: the redis
	// backend needs a url, or addrs for a cluster or Sentinel". Empty
	// when the section may be left out.
	Needs string
	// Load reads the files the options name (paths relative to dir, the
	// config file's directory) into s, once the file is valid. Its error
	// names the field: "store.redis.hash_secret_file: ...". Nil for a
	// backend whose options name no files.
	Load func(s *Settings, dir string) error
	// CheckLimit reports a valid limit the backend cannot run, which
	// check-config reports at the limit's line (for the rules, their
	// tiers and the service's descriptors alike) rather than letting
	// every decision on it fail. Nil when the backend runs every valid
	// limit.
	CheckLimit func(sluice.Limit) error
	// Open opens the backend's store with s, registers its metrics in
	// env.Registry and starts what it runs in the background with env.Go.
	// It fails only when the store cannot be built at all: a backend
	// that cannot reach its service yet opens degraded (see Degradable).
	Open func(env Env, s Settings) (Opened, error)
}

// Section is one mapping of a backend's options: its path, and its
// fields in the order messages list them.
type Section struct {
	Path   string   // "store.redis.quota"
	Fields []string // "lease_rate", "lease_fraction", "lease_ttl"
}

// Settings are the store section of a config file, decoded: what a
// backend opens with.
type Settings struct {
	// MaxKeys caps the entries of an in-memory store (store.max_keys):
	// the memory backend's, and the redis backend's local fallback.
	// Default 1,000,000.
	MaxKeys int
	// Redis holds the redis backend's options: store.redis, and
	// store.on_error as its OnError.
	Redis redisstore.Options
	// HashSecretFile is store.redis.hash_secret_file as written: Load
	// reads it into Redis.HashSecret.
	HashSecretFile string
	// Options holds the options of any other backend with a section of
	// its own, as its Decode left them; nil for one without.
	Options any
}

// Decoder is the config loader's YAML walker, lent to a backend to
// decode its section with. Each problem is reported with its path, line
// and column, and the walk goes on so that one pass finds them all. A
// method that finds a value it does not want reports it, at n, and
// returns false.
type Decoder interface {
	// Fields calls each with every field of the mapping n and its value,
	// in the file's order, and reports a field that sec does not list or
	// that appears twice, and an n that is not a mapping (a null n is an
	// empty one). sec must be one of the backend's Sections.
	Fields(n *yaml.Node, sec Section, each func(key string, v *yaml.Node))
	// Problem reports a problem at n (its line and column; nil for none)
	// and path: the message is fmt.Sprintf(format, args...).
	Problem(n *yaml.Node, path, format string, args ...any)
	// Resolve returns the node the alias n stands for, or n.
	Resolve(n *yaml.Node) *yaml.Node
	// String decodes a string.
	String(n *yaml.Node, path string) (string, bool)
	// Strings decodes a list of strings.
	Strings(n *yaml.Node, path string) ([]string, bool)
	// Integer decodes a whole number from lo to hi.
	Integer(n *yaml.Node, path string, lo, hi int64) (int64, bool)
	// Duration decodes a duration from lo to hi, such as 50ms.
	Duration(n *yaml.Node, path string, lo, hi time.Duration) (time.Duration, bool)
	// Bool decodes true or false.
	Bool(n *yaml.Node, path string) (bool, bool)
	// Percent decodes a percentage (0 to 100, such as 2.5%), reporting
	// anything else but a scalar as "want a percentage of OF, got ...":
	// of is "the limit such as 5%", say.
	Percent(n *yaml.Node, path, of string) (float64, bool)
}

// Env is what the server lends a backend it opens.
type Env struct {
	// Log receives the backend's logs.
	Log *slog.Logger
	// Registry takes the backend's metrics.
	Registry prometheus.Registerer
	// Clock tells in-memory stores the time (nil: clock.Default()).
	Clock memstore.Clock
	// Failed counts one failed operation of the store in
	// sluice_store_errors_total{backend="<Name>"}.
	Failed func()
	// Degraded tells the server, at time t, that decisions have started
	// (true) or stopped (false) following store.on_error, for the admin
	// API's overview.
	Degraded func(t time.Time, degraded bool)
	// Go runs f on a goroutine until the server closes, which ends ctx
	// and waits for f to return.
	Go func(f func(ctx context.Context))
}

// Opened is an open backend. What only some backends can do, they do
// through the interfaces Shared, Degradable and KeyHasher.
type Opened interface {
	// Store returns the store every generation of the server decides on.
	Store() sluice.Store
	// Ready returns nil when the store decides as configured, or why it
	// does not: /readyz's answer.
	Ready(ctx context.Context) error
	// Close releases the store. The server calls it once, after its
	// background work (Env.Go) has ended.
	Close() error
}

// Shared is an opened backend whose state every process on it shares:
// the counters, the leases of concurrency rules and fleet limits, and the
// admin API's overrides, which the server keeps in the backend and polls
// for the changes other processes make. A backend that is not Shared
// keeps the overrides in the process.
type Shared interface {
	Opened
	// Overrides returns where the overrides are kept for every process on
	// the backend (overrides.Options' Redis and Prefix): a function that
	// returns the Redis client (nil while there is none yet), and the
	// prefix of their key names.
	Overrides() (client func() rueidis.Client, prefix string)
}

// Degradable is an opened backend that can fail to decide, and then
// decides by store.on_error: Redis, while it is unreachable.
type Degradable interface {
	Opened
	// Degraded reports whether decisions follow store.on_error now.
	Degraded() bool
}

// KeyHasher is an opened backend that may hold digests of the keys
// rather than the keys (store.redis.hash_keys): the admin API then shows
// the digests, which are what an operator finds in the store.
type KeyHasher interface {
	Opened
	// HashesKeys reports whether the store holds digests.
	HashesKeys() bool
	// KeyDigest returns what the store holds for key.
	KeyDigest(key string) string
}

// orList joins words for a message: "a", "a or b", "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}
