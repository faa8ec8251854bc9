// Package overrides keeps the overrides an operator sets through the admin
// API, of two kinds: per-client overrides for the gateway (a Client, a
// value of tiers.from such as an API key, put in another tier or given
// limits of its own for named rules) and descriptor overrides for the
// rate-limit service (a Descriptor, one descriptor of a domain given
// limits of its own), each optionally until a time. They live in the store
// the limits are decided on, beside the counters: in the process with the
// memory store, in Redis with the Redis store, where every process on that
// Redis sees a change within its poll interval. They outlive reloads of the
// config file.
//
// Both kinds are kept by one mechanism, a Set of the kind's entries, which
// stores, reads, polls, bounds and ends them. Clients and Descriptors are
// the Sets of each kind, with the lookup their consumer makes on the
// request path: httplimit.Overrides and rls.Overrides. All are safe for
// concurrent use.
package overrides

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
)

// Bounds on what a Set holds.
const (
	MaxClientLen       = 512      // bytes in a client value
	MaxRules           = 64       // rules with limits of their own, per client
	MaxDescriptorIDLen = 16 << 10 // bytes in a descriptor's ID
	MaxEntries         = 100000   // entries of one kind
)

// Errors. Match them with errors.Is.
var (
	// ErrInvalid reports an entry that can never work; the message says why.
	ErrInvalid = errors.New("overrides: invalid override")
	// ErrFull reports a Set that already holds MaxEntries entries.
	ErrFull = errors.New("overrides: too many overrides")
	// ErrNotConnected reports a Redis client that is not connected yet.
	ErrNotConnected = errors.New("overrides: not connected to Redis yet")
)

// Options configure a Set.
type Options struct {
	// Store is the store the limits are decided on; the entries' own
	// limits are kept in it. Required.
	Store sluice.Store
	// Redis, if set, returns the Redis client of the store (nil while
	// there is none yet): the Set is kept in Redis, shared by every
	// process on it, and Run polls it. Default nil: the Set is kept in the
	// process.
	Redis func() rueidis.Client
	// Prefix starts the names of the Set's keys in Redis (the store's
	// prefix): clients' overrides are the hash "<Prefix>:{overrides}" and
	// descriptors' "<Prefix>:{overrides}:descriptors", each beside a
	// version counter named as the hash plus ":version". Default "sluice".
	Prefix string
	// Now tells the time, for Until. Default time.Now.
	Now func() time.Time
	// Poll is how often a Set on Redis asks Redis whether the overrides
	// changed (one GET), with ±25% jitter so that processes started
	// together do not ask together. Default 500ms.
	Poll time.Duration
	// After returns a channel that receives once d has passed: Run waits
	// on it between two refreshes. Default time.After; tests pass one
	// they tick by hand.
	After func(d time.Duration) <-chan time.Time
	// Timeout bounds how long a Refresh (each of Run's polls among them)
	// waits for Redis: one that gets no answer within it fails, rather
	// than waiting out an outage (the client retries reads until their
	// context ends). Default ten Polls: 5s with the default Poll.
	Timeout time.Duration
	// OnError, if set, is told of every stored entry that cannot be used
	// (it is skipped).
	OnError func(error)
	// OnRefresh, if set, is told of the outcome of every refresh that Run
	// makes: nil when the overrides were read (or found unchanged), the
	// error when they could not be, and the Set keeps the last ones it
	// read. While Redis is away every poll fails: a process tells an
	// outage's start and end from the changes of outcome, rather than
	// logging each failure.
	OnRefresh func(error)
}

// Entry is one kind of override, as a Set holds it: an entry names,
// checks and compiles itself for its consumer. Client and Descriptor are
// the kinds.
type Entry[E any] interface {
	// compile checks the entry on its own and returns it ready for its
	// consumer on store: with its ID, and the form the request path's
	// lookup returns. Errors wrap ErrInvalid.
	compile(store sluice.Store) (E, error)
	// id returns the ID a compiled entry is stored under, which the admin
	// API's routes name it by.
	id() string
	// key returns the key the request path's lookup finds the entry by.
	key() string
	// ends returns when the override ends; zero for never.
	ends() time.Time
}

// kind is what tells the kinds of a Set apart, beyond their entries.
type kind struct {
	noun string // what an entry is the override of, in messages
	hash string // the name of the Redis hash, after "<Prefix>:{overrides}"
	// parse returns the ID under which the entry that id names is
	// stored, and its key; nil when both are id itself. Errors wrap
	// ErrInvalid.
	parse func(id string) (stored, key string, err error)
}

// Set is the entries of one kind of override in one store, by ID. Build
// one through its kind: NewClients or NewDescriptors.
//
// Lookups (Get, and the request path's lookup of each kind) read the
// entries last read from the store: an atomic load and a map lookup; List
// and Len go through them all. Changes (Put, Delete) go to the store and
// are read back at once; Refresh, and Run on Redis, read the changes other
// processes made.
type Set[E Entry[E]] struct {
	opts Options
	kind kind
	be   backend
	snap atomic.Pointer[snapshot[E]]
	mu   sync.Mutex // serialises refreshes
}

// snapshot is the entries as read at one version.
type snapshot[E any] struct {
	version int64
	m       map[string]*item[E] // by key
}

type item[E any] struct {
	e     E         // compiled
	id    string    // e.id()
	key   string    // e.key()
	until time.Time // e.ends(), for the request path
	raw   []byte    // as stored, so that a refresh reuses unchanged items
}

func (s *Set[E]) init(opts Options, k kind) error {
	if opts.Store == nil {
		return errors.New("overrides: no store")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Poll <= 0 {
		opts.Poll = 500 * time.Millisecond
	}
	if opts.After == nil {
		opts.After = time.After
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * opts.Poll
	}
	if opts.Prefix == "" {
		opts.Prefix = "sluice"
	}
	s.opts, s.kind = opts, k
	if opts.Redis != nil {
		s.be = newRedis(opts.Redis, opts.Prefix+":{overrides}"+k.hash)
	} else {
		s.be = &memory{m: map[string][]byte{}}
	}
	s.snap.Store(&snapshot[E]{version: -1})
	return nil
}

// inForce reports whether an entry that ends at until (zero for never) is
// in force at now().
func inForce(until time.Time, now func() time.Time) bool {
	return until.IsZero() || before(now, until)
}

// before reports whether now() is before t. It is kept out of line so that
// inForce inlines into the lookups of the request path: an entry that never
// ends costs no call.
//
//go:noinline
func before(now func() time.Time, t time.Time) bool { return now().Before(t) }

// parse returns the ID under which the entry that id names is stored, and
// its key. Errors wrap ErrInvalid.
func (s *Set[E]) parse(id string) (stored, key string, err error) {
	if s.kind.parse == nil {
		return id, id, nil
	}
	return s.kind.parse(id)
}

// Get returns the entry with the given ID, if it is in force.
func (s *Set[E]) Get(id string) (E, bool) {
	_, key, err := s.parse(id)
	var it *item[E]
	if err == nil {
		it = s.snap.Load().m[key]
	}
	if it == nil || !inForce(it.until, s.opts.Now) {
		var zero E
		return zero, false
	}
	return it.e, true
}

// List returns the entries in force, sorted by ID.
func (s *Set[E]) List() []E {
	m := s.snap.Load().m
	its := make([]*item[E], 0, len(m))
	for _, it := range m {
		if inForce(it.until, s.opts.Now) {
			its = append(its, it)
		}
	}
	slices.SortFunc(its, func(a, b *item[E]) int { return strings.Compare(a.id, b.id) })
	out := make([]E, len(its))
	for i, it := range its {
		out[i] = it.e
	}
	return out
}

// Len returns the number of entries in force.
func (s *Set[E]) Len() int {
	n := 0
	for _, it := range s.snap.Load().m {
		if inForce(it.until, s.opts.Now) {
			n++
		}
	}
	return n
}

// Put stores e, replacing the entry with its ID, and applies it at once in
// this process (and, on Redis, in the others within their poll interval).
// It returns e as stored, with its ID. Errors wrap ErrInvalid or ErrFull,
// or are the store's.
func (s *Set[E]) Put(ctx context.Context, e E) (E, error) {
	var zero E
	e, err := e.compile(s.opts.Store)
	if err != nil {
		return zero, err
	}
	if until := e.ends(); !until.IsZero() && !until.After(s.opts.Now()) {
		return zero, fmt.Errorf("%w: until %s is not in the future", ErrInvalid, until.Format(time.RFC3339))
	}
	id := e.id()
	if _, ok := s.Get(id); !ok && s.Len() >= MaxEntries {
		return zero, fmt.Errorf("%w: at most %d", ErrFull, MaxEntries)
	}
	data, err := json.Marshal(e)
	if err != nil {
		return zero, fmt.Errorf("overrides: %w", err)
	}
	if err := s.be.put(ctx, id, data); err != nil {
		return zero, err
	}
	return e, s.Refresh(ctx)
}

// Delete removes the entry with the given ID and reports whether there was
// one. An ID that can name no entry is an error wrapping ErrInvalid.
func (s *Set[E]) Delete(ctx context.Context, id string) (bool, error) {
	id, _, err := s.parse(id)
	if err != nil {
		return false, err
	}
	ok, err := s.be.del(ctx, id)
	if err != nil {
		return false, err
	}
	return ok, s.Refresh(ctx)
}

// Refresh removes the entries that have ended from the store, and reads
// the entries again if their version changed, within Options.Timeout. An
// entry whose stored form did not change is kept as it was, not compiled
// again.
func (s *Set[E]) Refresh(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	prev := s.snap.Load()
	// An override whose until has passed no longer applies, and would
	// otherwise stay in the store for good. The first Set to see one ended
	// removes it (unless it was put again meanwhile), and every Set
	// reloads.
	for _, it := range prev.m {
		if !inForce(it.until, s.opts.Now) {
			if _, err := s.be.prune(ctx, it.id, it.raw); err != nil {
				return err
			}
		}
	}
	v, err := s.be.version(ctx)
	if err != nil {
		return err
	}
	if v == prev.version {
		return nil
	}
	raw, v, err := s.be.load(ctx)
	if err != nil {
		return err
	}
	byID := make(map[string]*item[E], len(prev.m))
	for _, it := range prev.m {
		byID[it.id] = it
	}
	m := make(map[string]*item[E], len(raw))
	for id, data := range raw {
		if it := byID[id]; it != nil && bytes.Equal(it.raw, data) {
			m[it.key] = it
			continue
		}
		var e E
		err := json.Unmarshal(data, &e)
		if err == nil {
			e, err = e.compile(s.opts.Store)
		}
		if err == nil && e.id() != id {
			err = errors.New("it is stored under another ID than its own")
		}
		if err != nil {
			s.failed(fmt.Errorf("overrides: skipping the stored override of a %s: %w", s.kind.noun, err))
			continue
		}
		it := &item[E]{e: e, id: id, key: e.key(), until: e.ends(), raw: data}
		m[it.key] = it
	}
	s.snap.Store(&snapshot[E]{version: v, m: m})
	return nil
}

func (s *Set[E]) failed(err error) {
	if s.opts.OnError != nil {
		s.opts.OnError(err)
	}
}

// Run refreshes the Set every Poll, with ±25% jitter, until ctx is done,
// telling Options.OnRefresh of each outcome. Only a Set on Redis needs it:
// another process may change the entries.
func (s *Set[E]) Run(ctx context.Context) {
	for {
		d := s.opts.Poll*3/4 + rand.N(s.opts.Poll/2+1)
		select {
		case <-ctx.Done():
			return
		case <-s.opts.After(d):
		}
		if err := s.Refresh(ctx); ctx.Err() == nil && s.opts.OnRefresh != nil {
			s.opts.OnRefresh(err)
		}
	}
}
