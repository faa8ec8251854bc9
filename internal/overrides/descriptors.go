package overrides

import (
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/descriptor"
	"github.com/sluicehq/sluice/internal/rls"
)

// Descriptor is one descriptor of the rate-limit service (a domain and
// the entries of one descriptor, as Envoy sends them: one counter) given
// limits of its own: the kind of entry of Descriptors.
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

	m descriptor.Match // set by compile
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

// parseID returns the ID under which the override that id names is
// stored (id may escape more than DescriptorID does), and its key. Errors
// wrap ErrInvalid.
func parseID(id string) (stored, key string, err error) {
	domain, entries, err := ParseDescriptorID(id)
	if err != nil {
		return "", "", err
	}
	return DescriptorID(domain, entries), string(descriptor.AppendKey(nil, domain, entries)), nil
}

// compile checks d on its own, and sets its ID and the match the
// rate-limit service applies for it (descriptor.KeyOverride). The store
// plays no part: the service charges the match's policy on its own.
func (d Descriptor) compile(sluice.Store) (Descriptor, error) {
	switch {
	case d.Domain == "":
		return Descriptor{}, fmt.Errorf("%w: the domain is empty", ErrInvalid)
	case len(d.Entries) == 0:
		return Descriptor{}, fmt.Errorf("%w: the descriptor has no entries", ErrInvalid)
	case len(d.Limits) == 0 || len(d.Limits) > sluice.MaxLimits:
		return Descriptor{}, fmt.Errorf("%w: %d limits, want 1 to %d", ErrInvalid, len(d.Limits), sluice.MaxLimits)
	case !utf8.ValidString(d.Domain):
		return Descriptor{}, fmt.Errorf("%w: the domain is not UTF-8", ErrInvalid)
	}
	for i, e := range d.Entries {
		if e.Key == "" {
			return Descriptor{}, fmt.Errorf("%w: entries[%d] has an empty key", ErrInvalid, i)
		}
		if !utf8.ValidString(e.Key) || !utf8.ValidString(e.Value) {
			return Descriptor{}, fmt.Errorf("%w: entries[%d] is not UTF-8", ErrInvalid, i)
		}
	}
	d.ID = DescriptorID(d.Domain, d.Entries)
	if n := len(d.ID); n > MaxDescriptorIDLen {
		return Descriptor{}, fmt.Errorf("%w: the descriptor's ID would be %d bytes, at most %d", ErrInvalid, n, MaxDescriptorIDLen)
	}
	limits := make([]sluice.Limit, len(d.Limits))
	for i, l := range d.Limits {
		lim, err := l.limit()
		if err != nil {
			return Descriptor{}, fmt.Errorf("%w: limits[%d]: %w", ErrInvalid, i, err)
		}
		limits[i] = lim
	}
	var err error
	if d.m, err = descriptor.KeyOverride(d.Domain, d.Entries, limits...); err != nil {
		return Descriptor{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return d, nil
}

func (d Descriptor) id() string      { return d.ID }
func (d Descriptor) key() string     { return string(descriptor.AppendKey(nil, d.Domain, d.Entries)) }
func (d Descriptor) ends() time.Time { return d.Until }

// Descriptors is the rate-limit service's descriptor overrides: a Set of
// Descriptor entries, by DescriptorID, which the service looks up for
// every descriptor of every request (it implements rls.Overrides) by
// descriptor.AppendKey.
type Descriptors struct{ Set[Descriptor] }

var _ rls.Overrides = (*Descriptors)(nil)

// NewDescriptors returns the descriptor overrides of opts.Store.
func NewDescriptors(opts Options) (*Descriptors, error) {
	d := new(Descriptors)
	if err := d.init(opts, kind{noun: "descriptor", hash: ":descriptors", parse: parseID}); err != nil {
		return nil, err
	}
	return d, nil
}

// Override implements rls.Overrides: the match of the descriptor's own
// limits, if an override in force names exactly this domain and these
// entries. It costs an atomic load while there are none; otherwise the
// descriptor's key, written on the stack while it is at most 256 bytes,
// and a map lookup.
func (d *Descriptors) Override(domain string, entries []descriptor.Entry) (descriptor.Match, bool) {
	snap := d.snap.Load()
	if len(snap.m) == 0 {
		return descriptor.Match{}, false
	}
	var arr [256]byte
	it := snap.m[string(descriptor.AppendKey(arr[:0], domain, entries))]
	if it == nil || !inForce(it.until, d.opts.Now) {
		return descriptor.Match{}, false
	}
	return it.e.m, true
}
