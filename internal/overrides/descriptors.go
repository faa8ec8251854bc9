package overrides

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/descriptor"
	"github.com/sluicehq/sluice/internal/rls"
)

var _ rls.Overrides = (*DescriptorSet)(nil)

// Bounds on a descriptor override, beyond those the rate-limit service
// puts on the descriptors it decides (which the admin API checks).
const (
	MaxDescriptorIDLen = 16 << 10 // bytes in a descriptor's ID
)

// Descriptor is one descriptor of the rate-limit service (a domain and
// the entries of one descriptor, as Envoy sends them: one counter) given
// limits of its own, optionally until a time.
type Descriptor struct {
	// ID names the override in the admin API's routes: DescriptorID of
	// Domain and Entries. Set by the Set.
	ID      string             `json:"id"`
	Domain  string             `json:"domain"`
	Entries []descriptor.Entry `json:"entries"`
	// Limits are the descriptor's own limits, charged together: 1 to
	// sluice.MaxLimits of them, each with its algorithm.
	Limits []Limit `json:"limits"`
	// Until, if not zero, is when the override ends.
	Until time.Time `json:"until,omitzero"`
}

// DescriptorID returns the ID of a descriptor override: the domain, then
// each entry as "/key=value", with "%", "/", "=" and control characters
// escaped as %XX, so that distinct descriptors get distinct IDs, such as
// "api/client=a". ParseDescriptorID reverses it.
func DescriptorID(domain string, entries []descriptor.Entry) string {
	var sb strings.Builder
	escapeID(&sb, domain)
	for _, e := range entries {
		sb.WriteByte('/')
		escapeID(&sb, e.Key)
		sb.WriteByte('=')
		escapeID(&sb, e.Value)
	}
	return sb.String()
}

func escapeID(sb *strings.Builder, s string) {
	const hexdig = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' || c == '/' || c == '=' || c < 0x20 || c == 0x7f {
			sb.WriteByte('%')
			sb.WriteByte(hexdig[c>>4])
			sb.WriteByte(hexdig[c&15])
			continue
		}
		sb.WriteByte(c)
	}
}

// ParseDescriptorID returns the domain and entries an ID names. Errors
// wrap ErrInvalid.
func ParseDescriptorID(id string) (string, []descriptor.Entry, error) {
	parts := strings.Split(id, "/")
	if len(parts) < 2 {
		return "", nil, fmt.Errorf("%w: descriptor ID %q: want domain/key=value[/key=value...]", ErrInvalid, id)
	}
	domain, err := url.PathUnescape(parts[0])
	if err != nil {
		return "", nil, fmt.Errorf("%w: descriptor ID %q: %v", ErrInvalid, id, err)
	}
	entries := make([]descriptor.Entry, 0, len(parts)-1)
	for _, p := range parts[1:] {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return "", nil, fmt.Errorf("%w: descriptor ID %q: entry %q has no =", ErrInvalid, id, p)
		}
		var e descriptor.Entry
		if e.Key, err = url.PathUnescape(k); err == nil {
			e.Value, err = url.PathUnescape(v)
		}
		if err != nil {
			return "", nil, fmt.Errorf("%w: descriptor ID %q: %v", ErrInvalid, id, err)
		}
		entries = append(entries, e)
	}
	return domain, entries, nil
}

// match checks d on its own, and returns the match the rate-limit
// service applies for it.
func (d Descriptor) match() (descriptor.Match, error) {
	switch {
	case d.Domain == "":
		return descriptor.Match{}, fmt.Errorf("%w: the domain is empty", ErrInvalid)
	case len(d.Entries) == 0:
		return descriptor.Match{}, fmt.Errorf("%w: the descriptor has no entries", ErrInvalid)
	case len(d.Limits) == 0 || len(d.Limits) > sluice.MaxLimits:
		return descriptor.Match{}, fmt.Errorf("%w: %d limits, want 1 to %d", ErrInvalid, len(d.Limits), sluice.MaxLimits)
	case !utf8.ValidString(d.Domain):
		return descriptor.Match{}, fmt.Errorf("%w: the domain is not UTF-8", ErrInvalid)
	}
	for i, e := range d.Entries {
		if e.Key == "" {
			return descriptor.Match{}, fmt.Errorf("%w: entries[%d] has an empty key", ErrInvalid, i)
		}
		if !utf8.ValidString(e.Key) || !utf8.ValidString(e.Value) {
			return descriptor.Match{}, fmt.Errorf("%w: entries[%d] is not UTF-8", ErrInvalid, i)
		}
	}
	if n := len(DescriptorID(d.Domain, d.Entries)); n > MaxDescriptorIDLen {
		return descriptor.Match{}, fmt.Errorf("%w: the descriptor's ID would be %d bytes, at most %d", ErrInvalid, n, MaxDescriptorIDLen)
	}
	limits := make([]sluice.Limit, len(d.Limits))
	for i, l := range d.Limits {
		lim, err := l.limit()
		if err != nil {
			return descriptor.Match{}, fmt.Errorf("%w: limits[%d]: %w", ErrInvalid, i, err)
		}
		limits[i] = lim
	}
	m, err := descriptor.KeyOverride(d.Domain, d.Entries, limits...)
	if err != nil {
		return descriptor.Match{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return m, nil
}

// DescriptorSet is the descriptor overrides of one store, kept as a Set
// keeps client overrides: in the process with the memory store, in Redis
// (a hash of its own beside the clients') with the Redis store, where
// every instance sees a change within its poll interval. Build one with
// NewDescriptorMemory or NewDescriptorRedis.
//
// It implements the rate-limit service's overrides (rls.Overrides): a
// lookup costs one atomic load while there are none, and one map lookup
// otherwise. It is safe for concurrent use.
type DescriptorSet struct {
	opts Options
	be   backend
	snap atomic.Pointer[descSnapshot]
	mu   sync.Mutex // serialises refreshes
}

type descSnapshot struct {
	version int64
	m       map[string]*descItem // by descriptor.AppendKey
}

type descItem struct {
	d   Descriptor
	m   descriptor.Match
	raw []byte // as stored, so that a refresh reuses unchanged items
}

// NewDescriptorMemory returns a DescriptorSet kept in the process.
func NewDescriptorMemory(opts Options) (*DescriptorSet, error) {
	return newDescriptorSet(opts, &memory{m: map[string][]byte{}})
}

// NewDescriptorRedis returns a DescriptorSet kept in Redis under keys
// starting with prefix, as NewRedis. Call Run to see other processes'
// changes.
func NewDescriptorRedis(opts Options, client func() rueidis.Client, prefix string) (*DescriptorSet, error) {
	if client == nil {
		return nil, errors.New("overrides: no Redis client")
	}
	return newDescriptorSet(opts, newRedisBackend(client, prefix+":{overrides}:descriptors"))
}

func newDescriptorSet(opts Options, be backend) (*DescriptorSet, error) {
	s0, err := newSet(opts, be) // the same defaults
	if err != nil {
		return nil, err
	}
	s := &DescriptorSet{opts: s0.opts, be: be}
	s.snap.Store(&descSnapshot{version: -1})
	return s, nil
}

// Override returns the match of the descriptor's own limits, if an
// override in force names exactly this domain and these entries.
func (s *DescriptorSet) Override(domain string, entries []descriptor.Entry) (descriptor.Match, bool) {
	snap := s.snap.Load()
	if len(snap.m) == 0 {
		return descriptor.Match{}, false
	}
	var arr [256]byte
	it := snap.m[string(descriptor.AppendKey(arr[:0], domain, entries))]
	if it == nil || s.ended(it.d) {
		return descriptor.Match{}, false
	}
	return it.m, true
}

func (s *DescriptorSet) ended(d Descriptor) bool {
	return !d.Until.IsZero() && !s.opts.Now().Before(d.Until)
}

// Get returns the override with the given ID, if it is in force.
func (s *DescriptorSet) Get(id string) (Descriptor, bool) {
	domain, entries, err := ParseDescriptorID(id)
	if err != nil {
		return Descriptor{}, false
	}
	it := s.snap.Load().m[string(descriptor.AppendKey(nil, domain, entries))]
	if it == nil || s.ended(it.d) {
		return Descriptor{}, false
	}
	return it.d, true
}

// List returns the overrides in force, sorted by ID.
func (s *DescriptorSet) List() []Descriptor {
	snap := s.snap.Load()
	out := make([]Descriptor, 0, len(snap.m))
	for _, it := range snap.m {
		if !s.ended(it.d) {
			out = append(out, it.d)
		}
	}
	slices.SortFunc(out, func(a, b Descriptor) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Len returns the number of overrides in force.
func (s *DescriptorSet) Len() int {
	n := 0
	for _, it := range s.snap.Load().m {
		if !s.ended(it.d) {
			n++
		}
	}
	return n
}

// Put stores d, replacing the override of the same descriptor, and
// applies it at once in this process (and, on Redis, in the others within
// their poll interval). It returns d as stored, with its ID. Errors wrap
// ErrInvalid or ErrFull, or are the store's.
func (s *DescriptorSet) Put(ctx context.Context, d Descriptor) (Descriptor, error) {
	if _, err := d.match(); err != nil {
		return Descriptor{}, err
	}
	if !d.Until.IsZero() && !d.Until.After(s.opts.Now()) {
		return Descriptor{}, fmt.Errorf("%w: until %s is not in the future", ErrInvalid, d.Until.Format(time.RFC3339))
	}
	d.ID = DescriptorID(d.Domain, d.Entries)
	if _, ok := s.Get(d.ID); !ok && s.Len() >= MaxEntries {
		return Descriptor{}, fmt.Errorf("%w: at most %d", ErrFull, MaxEntries)
	}
	data, err := json.Marshal(d)
	if err != nil {
		return Descriptor{}, fmt.Errorf("overrides: %w", err)
	}
	if err := s.be.put(ctx, d.ID, data); err != nil {
		return Descriptor{}, err
	}
	return d, s.Refresh(ctx)
}

// Delete removes the override with the given ID and reports whether there
// was one.
func (s *DescriptorSet) Delete(ctx context.Context, id string) (bool, error) {
	domain, entries, err := ParseDescriptorID(id)
	if err != nil {
		return false, err
	}
	ok, err := s.be.del(ctx, DescriptorID(domain, entries)) // the canonical form
	if err != nil {
		return false, err
	}
	return ok, s.Refresh(ctx)
}

// Refresh removes the overrides that have ended from the store, and reads
// the overrides again if their version changed, within Options.Timeout.
func (s *DescriptorSet) Refresh(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	if err := pruneEnded(ctx, s.be, s.snap.Load().m, func(it *descItem) (string, []byte, bool) {
		return it.d.ID, it.raw, s.ended(it.d)
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
	prev := make(map[string]*descItem, len(s.snap.Load().m))
	for _, it := range s.snap.Load().m {
		prev[it.d.ID] = it
	}
	m := make(map[string]*descItem, len(raw))
	for id, data := range raw {
		if it := prev[id]; it != nil && string(it.raw) == string(data) {
			m[string(descriptor.AppendKey(nil, it.d.Domain, it.d.Entries))] = it
			continue
		}
		var d Descriptor
		err := json.Unmarshal(data, &d)
		var dm descriptor.Match
		if err == nil {
			dm, err = d.match()
		}
		if err == nil && DescriptorID(d.Domain, d.Entries) != id {
			err = fmt.Errorf("stored under %q, not its ID", id)
		}
		if err != nil {
			s.failed(fmt.Errorf("overrides: skipping the stored override of a descriptor: %w", err))
			continue
		}
		d.ID = id
		m[string(descriptor.AppendKey(nil, d.Domain, d.Entries))] = &descItem{d: d, m: dm, raw: data}
	}
	s.snap.Store(&descSnapshot{version: v, m: m})
	return nil
}

func (s *DescriptorSet) failed(err error) {
	if s.opts.OnError != nil {
		s.opts.OnError(err)
	}
}

// Run refreshes the DescriptorSet every Poll (with jitter) until ctx is
// done, telling Options.OnRefresh of each outcome. Only a DescriptorSet on
// Redis needs it.
func (s *DescriptorSet) Run(ctx context.Context) {
	poll(ctx, s.opts.Poll, s.Refresh, s.opts.OnRefresh)
}
