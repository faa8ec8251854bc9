package descriptor_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/descriptor"
)

// TestAppendKey: the key of a descriptor is its domain and entries, each
// length-prefixed, so that descriptors that run their strings together
// differently get distinct keys; KeyOverride's counter key is the part of
// the entries.
func TestAppendKey(t *testing.T) {
	for _, tc := range []struct {
		domain  string
		entries []descriptor.Entry
		want    string
	}{
		{"api", e("client", "a"), "3:api6:client1:a"},
		{"api", e("client", ""), "3:api6:client0:"},
		{"", nil, "0:"},
		{"a:b", e("1:", ":2"), "3:a:b2:1:2::2"},
	} {
		if got := string(descriptor.AppendKey(nil, tc.domain, tc.entries)); got != tc.want {
			t.Errorf("AppendKey(%q, %v) = %q, want %q", tc.domain, tc.entries, got, tc.want)
		}
		if len(tc.entries) == 0 {
			continue
		}
		m, err := descriptor.KeyOverride(tc.domain, tc.entries, sluice.Limit{Algorithm: sluice.GCRA, Count: 1, Period: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if want := strings.TrimPrefix(tc.want, string(descriptor.AppendKey(nil, tc.domain, nil))); m.Key != want {
			t.Errorf("KeyOverride(%q, %v).Key = %q, want %q", tc.domain, tc.entries, m.Key, want)
		}
	}
	// Descriptors that run together the same way.
	for _, pair := range [][2]string{
		{"ab|c=d", "a|bc=d"},
		{"a|b=cd", "a|bc=d"},
		{"a|b=c|d=e", "a|b=c/d=e"},
		{"a|b=", "a|b=|="},
	} {
		d1, e1 := splitDescriptor(pair[0])
		d2, e2 := splitDescriptor(pair[1])
		if k1, k2 := descriptor.AppendKey(nil, d1, e1), descriptor.AppendKey(nil, d2, e2); string(k1) == string(k2) {
			t.Errorf("%q and %q: both get key %q", pair[0], pair[1], k1)
		}
	}
	es := e("client", "someone", "path", "/v1/things")
	var buf [256]byte
	if n := testing.AllocsPerRun(100, func() { descriptor.AppendKey(buf[:0], "api", es) }); n != 0 {
		t.Errorf("AppendKey into a large enough buffer: %v allocations, want 0", n)
	}
}

// splitDescriptor reads "domain|k=v|k=v".
func splitDescriptor(s string) (string, []descriptor.Entry) {
	parts := strings.Split(s, "|")
	var es []descriptor.Entry
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		es = append(es, descriptor.Entry{Key: k, Value: v})
	}
	return parts[0], es
}

// FuzzAppendKey: two descriptors get the same key only if they are the
// same descriptor.
func FuzzAppendKey(f *testing.F) {
	for _, seed := range [][2]string{{"ab|c=d", "a|bc=d"}, {"a|b=1:c", "a|b=1|:c="}, {"a|b=c", "a|b=c"}, {"", "|"}} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		d1, e1 := splitDescriptor(a)
		d2, e2 := splitDescriptor(b)
		same := d1 == d2 && slices.Equal(e1, e2)
		if k1, k2 := descriptor.AppendKey(nil, d1, e1), descriptor.AppendKey(nil, d2, e2); (string(k1) == string(k2)) != same {
			t.Errorf("%q and %q: keys %q and %q; same descriptor: %v", a, b, k1, k2, same)
		}
	})
}
