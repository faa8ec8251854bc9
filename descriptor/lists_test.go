package descriptor_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/accesslist"
	"github.com/sluicehq/sluice/descriptor"
)

func TestLists(t *testing.T) {
	s := mustNew(t, testTree)
	bad := accesslist.NewKeySet([]string{"evil", "worse"})
	partners := accesslist.NewKeySet([]string{"acme"})
	ls, err := s.WithLists(
		descriptor.List{Name: "partners", Key: "api_key", Values: partners},
		descriptor.List{Name: "bad", Key: "api_key", Deny: true, Values: bad},
		descriptor.List{Name: "bad-users", Key: "user", Deny: true, Values: bad},
	)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		entries       []descriptor.Entry
		denied, allow string
	}{
		{e("api_key", "evil"), "bad", ""},
		{e("path", "/", "user", "worse"), "bad-users", ""},
		{e("api_key", "acme"), "", "partners"},
		{e("api_key", "other"), "", ""},
		{e("user", "acme"), "", ""},
		{nil, "", ""},
	} {
		d, _ := ls.Denied(tt.entries)
		a, _ := ls.AllowListedBy(tt.entries)
		if d != tt.denied || a != tt.allow {
			t.Errorf("%v: denied by %q, allowed by %q; want %q, %q", tt.entries, d, a, tt.denied, tt.allow)
		}
	}
	// The original Set has no lists, and both keep the same rules.
	if _, ok := s.Denied(e("api_key", "evil")); ok || len(s.Lists()) != 0 || len(ls.Lists()) != 3 {
		t.Errorf("WithLists changed the Set it was called on, or lost lists")
	}
	if s.Match("test", e("anything", "a")).Rule != ls.Match("test", e("anything", "a")).Rule {
		t.Errorf("the Set with lists matches other rules")
	}
	if _, err := s.WithLists(descriptor.List{Name: "x", Key: "k"}); !errors.Is(err, descriptor.ErrInvalid) {
		t.Errorf("a list without values: got %v, want ErrInvalid", err)
	}
}

// BenchmarkLists measures the list lookups a decision makes for one
// descriptor: none without lists, and with a deny and an allow list of
// 100,000 keys on the descriptor's key.
func BenchmarkLists(b *testing.B) {
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%06d", i)
	}
	s := mustNew(b, benchTree())
	ls, err := s.WithLists(
		descriptor.List{Name: "deny", Key: "api_key", Deny: true, Values: accesslist.NewKeySet(keys[:50_000])},
		descriptor.List{Name: "allow", Key: "api_key", Values: accesslist.NewKeySet(keys[50_000:])},
	)
	if err != nil {
		b.Fatal(err)
	}
	es := e("remote_address", "192.0.2.1", "api_key", "key-077777")
	for _, c := range []struct {
		name string
		set  *descriptor.Set
	}{{"none", s}, {"100k", ls}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.set.Denied(es)
				c.set.AllowListedBy(es)
			}
		})
	}
}
