// Package overrides keeps the gateway's per-client overrides: a client (a
// value of tiers.from, such as an API key) put in another tier, or given
// limits of its own for named rules, optionally until a time. They live in
// the gateway's store, beside the counters: in the process with the memory
// store, in Redis with the Redis store, where every gateway on that Redis
// sees a change within its poll interval. They outlive reloads of the
// config file.
//
// A Set implements httplimit.Overrides. It is safe for concurrent use.
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
	"unicode/utf8"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/calendar"
	"github.com/sluicehq/sluice/httplimit"
)

// Bounds on what a Set holds.
const (
	MaxClientLen = 512    // bytes in a client value
	MaxRules     = 64     // rules with limits of their own, per client
	MaxEntries   = 100000 // clients with an override
)

// Errors. Match them with errors.Is.
var (
	// ErrInvalid reports an entry that can never work; the message says why.
	ErrInvalid = errors.New("overrides: invalid override")
	// ErrFull reports a Set that already holds MaxEntries clients.
	ErrFull = errors.New("overrides: too many overrides")
)

// Limit is a client's own limit for one rule, in the config file's terms.
type Limit struct {
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit"`
	// Period is a duration such as "1m", or a calendar period: "day",
	// "week", "month" or "year" (a quota renewed at the client's Anchor).
	Period string `json:"period"`
	Burst  int64  `json:"burst,omitempty"`
	// Timezone is the IANA zone of a calendar period; default UTC.
	Timezone string `json:"timezone,omitempty"`
}

// Entry is one client's override.
type Entry struct {
	Client string `json:"client"`
	// Tier, if not empty, is the client's tier.
	Tier string `json:"tier,omitempty"`
	// Limits are the client's own limits, by rule name.
	Limits map[string]Limit `json:"limits,omitempty"`
	// Until, if not zero, is when the override ends.
	Until time.Time `json:"until,omitzero"`
	// Anchor, if not empty, is the client's billing anchor, such as
	// "15T09:00" (see calendar.ParseAnchor): the calendar quotas that
	// decide its requests start their periods there.
	Anchor string `json:"anchor,omitempty"`
}

// Override converts e for httplimit, validating it.
func (e Entry) Override() (httplimit.Override, error) {
	o := httplimit.Override{Tier: e.Tier}
	if e.Anchor != "" {
		a, err := calendar.ParseAnchor(e.Anchor)
		if err != nil {
			return o, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		o.Anchor = &a
	}
	if len(e.Limits) > MaxRules {
		return o, fmt.Errorf("%w: %d rules with limits of their own, at most %d", ErrInvalid, len(e.Limits), MaxRules)
	}
	if len(e.Limits) > 0 {
		o.Limits = make(map[string]sluice.Limit, len(e.Limits))
	}
	for rule, l := range e.Limits {
		lim, err := l.limit()
		if err != nil {
			return o, fmt.Errorf("%w: rule %q: %w", ErrInvalid, rule, err)
		}
		o.Limits[rule] = lim
	}
	return o, nil
}

func (l Limit) limit() (sluice.Limit, error) {
	a, err := sluice.ParseAlgorithm(l.Algorithm)
	if err != nil {
		return sluice.Limit{}, err
	}
	if u, err := calendar.ParseUnit(l.Period); err == nil {
		z, err := calendar.LoadZone(l.Timezone)
		if err != nil {
			return sluice.Limit{}, err
		}
		c, err := calendar.New(calendar.Spec{Unit: u, Zone: z})
		if err != nil {
			return sluice.Limit{}, err
		}
		lim := sluice.Limit{Algorithm: a, Count: l.Limit, Burst: l.Burst, Calendar: c}
		return lim, lim.Validate()
	}
	if l.Timezone != "" {
		return sluice.Limit{}, fmt.Errorf("timezone %q: applies only to a period of day, week, month or year", l.Timezone)
	}
	p, err := time.ParseDuration(l.Period)
	if err != nil {
		return sluice.Limit{}, fmt.Errorf("period %q: want a duration such as 1m or 1h, or day, week, month or year", l.Period)
	}
	lim := sluice.Limit{Algorithm: a, Count: l.Limit, Period: p, Burst: l.Burst}
	return lim, lim.Validate()
}

// Validate checks e on its own (Set.Put also checks that Until is ahead
// of now).
func (e Entry) Validate() error {
	switch {
	case e.Client == "" || len(e.Client) > MaxClientLen:
		return fmt.Errorf("%w: the client must be 1 to %d bytes", ErrInvalid, MaxClientLen)
	case !utf8.ValidString(e.Client) || strings.ContainsFunc(e.Client, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("%w: the client must be UTF-8 without control characters", ErrInvalid)
	case e.Tier == "" && len(e.Limits) == 0 && e.Anchor == "":
		return fmt.Errorf("%w: give a tier, limits or an anchor", ErrInvalid)
	}
	_, err := e.Override()
	return err
}

// backend stores entries, encoded, with a version that changes with every
// change.
type backend interface {
	version(ctx context.Context) (int64, error)
	load(ctx context.Context) (map[string][]byte, int64, error)
	put(ctx context.Context, client string, data []byte) error
	del(ctx context.Context, client string) (bool, error)
	// prune removes client's entry if it is still data (so that an
	// override put again meanwhile stays), and reports whether it did.
	prune(ctx context.Context, client string, data []byte) (bool, error)
}

// pruneEnded removes from be the stored entries of the items that ended
// reports ended, by their key and the data they were loaded from:
// overrides whose until has passed no longer apply, and would otherwise
// stay in the store for good. The first Set to see one ended removes it
// (unless it was put again meanwhile), and every Set reloads.
func pruneEnded[T any](ctx context.Context, be backend, items map[string]T, ended func(T) (key string, data []byte, ok bool)) error {
	for _, it := range items {
		if k, data, ok := ended(it); ok {
			if _, err := be.prune(ctx, k, data); err != nil {
				return err
			}
		}
	}
	return nil
}

// Options configure a Set.
type Options struct {
	// Store is the store the gateway decides on; clients' own limits are
	// kept in it. Required.
	Store sluice.Store
	// Now tells the time, for Until. Default time.Now.
	Now func() time.Time
	// Poll is how often a Set on Redis asks Redis whether the overrides
	// changed (one GET), with ±25% jitter so that gateways started
	// together do not ask together. Default 500ms.
	Poll time.Duration
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

// Set is the overrides of one store. Build one with NewMemory or NewRedis.
type Set struct {
	opts Options
	be   backend
	snap atomic.Pointer[snapshot]
	mu   sync.Mutex // serialises refreshes
}

// snapshot is the overrides as read at one version.
type snapshot struct {
	version int64
	m       map[string]*item
}

type item struct {
	e   Entry
	co  *httplimit.ClientOverride
	raw []byte // as stored
}

var _ httplimit.Overrides = (*Set)(nil)

// NewMemory returns a Set kept in the process.
func NewMemory(opts Options) (*Set, error) { return newSet(opts, &memory{m: map[string][]byte{}}) }

func newSet(opts Options, be backend) (*Set, error) {
	if opts.Store == nil {
		return nil, errors.New("overrides: no store")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Poll <= 0 {
		opts.Poll = 500 * time.Millisecond
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * opts.Poll
	}
	s := &Set{opts: opts, be: be}
	s.snap.Store(&snapshot{version: -1})
	return s, nil
}

// Override implements httplimit.Overrides: the client's override, or nil
// if it has none or it has ended.
func (s *Set) Override(client string) *httplimit.ClientOverride {
	it := s.snap.Load().m[client]
	if it == nil || (!it.e.Until.IsZero() && !s.opts.Now().Before(it.e.Until)) {
		return nil
	}
	return it.co
}

// Get returns a client's override, if it has one that has not ended.
func (s *Set) Get(client string) (Entry, bool) {
	it := s.snap.Load().m[client]
	if it == nil || s.ended(it.e) {
		return Entry{}, false
	}
	return it.e, true
}

func (s *Set) ended(e Entry) bool { return !e.Until.IsZero() && !s.opts.Now().Before(e.Until) }

// List returns the overrides that have not ended, sorted by client.
func (s *Set) List() []Entry {
	snap := s.snap.Load()
	out := make([]Entry, 0, len(snap.m))
	for _, it := range snap.m {
		if !s.ended(it.e) {
			out = append(out, it.e)
		}
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Client, b.Client) })
	return out
}

// Len returns the number of overrides that have not ended.
func (s *Set) Len() int {
	n := 0
	for _, it := range s.snap.Load().m {
		if !s.ended(it.e) {
			n++
		}
	}
	return n
}

// Put stores e, replacing the client's override, and applies it at once
// in this process (and, on Redis, in the others within their poll
// interval).
func (s *Set) Put(ctx context.Context, e Entry) error {
	if err := e.Validate(); err != nil {
		return err
	}
	if !e.Until.IsZero() && !e.Until.After(s.opts.Now()) {
		return fmt.Errorf("%w: until %s is not in the future", ErrInvalid, e.Until.Format(time.RFC3339))
	}
	o, err := e.Override()
	if err != nil {
		return err
	}
	if _, err := httplimit.NewClientOverride(s.opts.Store, e.Client, o); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if _, ok := s.Get(e.Client); !ok && s.Len() >= MaxEntries {
		return fmt.Errorf("%w: at most %d", ErrFull, MaxEntries)
	}
	data, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("overrides: %w", err)
	}
	if err := s.be.put(ctx, e.Client, data); err != nil {
		return err
	}
	return s.Refresh(ctx)
}

// Delete removes a client's override and reports whether it had one.
func (s *Set) Delete(ctx context.Context, client string) (bool, error) {
	ok, err := s.be.del(ctx, client)
	if err != nil {
		return false, err
	}
	return ok, s.Refresh(ctx)
}

// Refresh removes the overrides that have ended from the store, and reads
// the overrides again if their version changed, within Options.Timeout.
func (s *Set) Refresh(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	if err := pruneEnded(ctx, s.be, s.snap.Load().m, func(it *item) (string, []byte, bool) {
		return it.e.Client, it.raw, s.ended(it.e)
	}); err != nil {
		return err
	}
	v, err := s.be.version(ctx)
	if err != nil {
		return err
	}
	if v == s.snap.Load().version {
		return nil
	}
	raw, v, err := s.be.load(ctx)
	if err != nil {
		return err
	}
	m := make(map[string]*item, len(raw))
	for client, data := range raw {
		var e Entry
		err := json.Unmarshal(data, &e)
		var o httplimit.Override
		if err == nil {
			o, err = e.Override()
		}
		var co *httplimit.ClientOverride
		if err == nil {
			co, err = httplimit.NewClientOverride(s.opts.Store, client, o)
		}
		if err != nil {
			s.failed(fmt.Errorf("overrides: skipping the stored override of a client: %w", err))
			continue
		}
		e.Client = client
		m[client] = &item{e: e, co: co, raw: data}
	}
	s.snap.Store(&snapshot{version: v, m: m})
	return nil
}

func (s *Set) failed(err error) {
	if s.opts.OnError != nil {
		s.opts.OnError(err)
	}
}

// Run refreshes the Set every Poll (with jitter) until ctx is done,
// telling Options.OnRefresh of each outcome. Only a Set on Redis needs it:
// another process may change the overrides.
func (s *Set) Run(ctx context.Context) { poll(ctx, s.opts.Poll, s.Refresh, s.opts.OnRefresh) }

// poll calls refresh every period, with ±25% jitter, until ctx is done,
// telling told (if not nil) of each outcome.
func poll(ctx context.Context, period time.Duration, refresh func(context.Context) error, told func(error)) {
	for {
		d := period*3/4 + rand.N(period/2+1)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if err := refresh(ctx); ctx.Err() == nil && told != nil {
			told(err)
		}
	}
}

// memory is the in-process backend.
type memory struct {
	mu sync.Mutex
	m  map[string][]byte
	v  int64
}

func (b *memory) version(context.Context) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.v, nil
}

func (b *memory) load(context.Context) (map[string][]byte, int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := make(map[string][]byte, len(b.m))
	for k, v := range b.m {
		m[k] = v
	}
	return m, b.v, nil
}

func (b *memory) put(_ context.Context, client string, data []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.m[client] = data
	b.v++
	return nil
}

func (b *memory) prune(_ context.Context, client string, data []byte) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if cur, ok := b.m[client]; !ok || !bytes.Equal(cur, data) {
		return false, nil
	}
	delete(b.m, client)
	b.v++
	return true, nil
}

func (b *memory) del(_ context.Context, client string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.m[client]
	if ok {
		delete(b.m, client)
		b.v++
	}
	return ok, nil
}
