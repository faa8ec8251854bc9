package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/storekit"
)

// usage is a sequence of requests at given times, used to bring a key into
// an interesting state.
type usage []struct {
	at time.Duration
	n  int64
}

// usages are the states the algorithm-neutral tests start from, for a limit
// of 5 per second (burst 5).
var usages = []struct {
	name string
	u    usage
}{
	{"one", usage{{0, 1}}},
	{"exhausted", usage{{0, 5}}},
	{"over_time", usage{{0, 2}, {300 * ms, 2}, {700 * ms, 1}, {1100 * ms, 3}}},
	{"denied_too", usage{{0, 5}, {100 * ms, 1}, {200 * ms, 5}, {1400 * ms, 2}}},
}

// testPeek checks that Peek charges nothing, on every algorithm: a key that
// is peeked at between requests decides every request exactly as a twin
// key that is not, and a peek reports whether one unit would be admitted.
func (s *suite) testPeek(t *testing.T) {
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			for _, u := range usages {
				t.Run(u.name, func(t *testing.T) {
					e := s.env(t)
					lim := e.limiter(limit(alg, 5, s1))
					if d := e.peek(lim, "peeked"); !e.check("Peek of a fresh key", lim.Policy(), d, allow(5, 0)) {
						return
					}
					for _, r := range u.u {
						e.at(r.at)
						for range 3 {
							e.peek(lim, "peeked")
						}
						a, b := e.take(lim, "peeked", r.n), e.take(lim, "twin", r.n)
						if !s.same(a, b) {
							t.Fatalf("AllowN(%d) at +%v: got %s after peeks, want %s as for a key never peeked at", r.n, e.now(), describe(a), describe(b))
						}
						p := e.peek(lim, "peeked")
						// Peek says whether one unit would pass now:
						// try it on the twin, then charge the peeked
						// key the same so that the twins stay equal.
						c, d := e.take(lim, "twin", 1), e.take(lim, "peeked", 1)
						if p.Allowed != c.Allowed || p.Remaining != b.Remaining || !s.same(c, d) {
							t.Fatalf("at +%v Peek = %s, then AllowN(1) = %s; want Allowed to agree and Remaining %d", e.now(), describe(p), describe(c), b.Remaining)
						}
					}
				})
			}
		})
	}
	t.Run("two_limits", func(t *testing.T) {
		e := s.env(t)
		lim := e.limiter(limit(sluice.GCRA, 5, s1), limit(sluice.SlidingLog, 8, time.Minute))
		e.script(lim, "k", []step{
			{0, peek, 0, allow(5, 0).by(0, 5)},
			{0, take, 5, allow(0, s1).by(0, 5)},
			{0, peek, 0, deny(0, 200*ms, s1).by(0, 5)},
			{s1, peek, 0, allow(3, time.Minute-s1).by(1, 8)}, // 5 left of L0, 3 of L1
			{s1, take, 3, allow(0, time.Minute).by(1, 8)},
			{s1, peek, 0, deny(0, 59*s1, time.Minute).by(1, 8)},
			{2 * s1, peek, 0, deny(0, 58*s1, 59*s1).by(1, 8)},
		})
	})
}

// testReset checks that Reset restores a key's full quota under one policy
// and touches nothing else.
func (s *suite) testReset(t *testing.T) {
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			e := s.env(t)
			l := limit(alg, 5, s1)
			p, q := e.limiter(l), e.limiter(l)
			e.at(300 * ms)
			for _, c := range []struct {
				lim *sluice.Limiter
				key string
			}{{p, "a"}, {p, "b"}, {q, "a"}} {
				if got := e.admitted(c.lim, c.key, 1, 7); got != 5 {
					t.Fatalf("policy %q key %q: admitted %d of 7, want 5", c.lim.Policy().Name(), c.key, got)
				}
			}
			e.reset(p, "a")
			e.reset(p, "never-seen")
			if d := e.peek(p, "a"); !e.check(`Peek("a") after Reset`, p.Policy(), d, allow(5, 0)) {
				return
			}
			if got := e.admitted(p, "a", 1, 7); got != 5 {
				t.Errorf(`key "a" after Reset: admitted %d of 7, want 5`, got)
			}
			for _, c := range []struct {
				lim *sluice.Limiter
				key string
			}{{p, "b"}, {q, "a"}} {
				if d := e.peek(c.lim, c.key); d.Allowed || d.Remaining != 0 {
					t.Errorf("policy %q key %q after Reset of another: Peek = %s, want denied with 0 remaining", c.lim.Policy().Name(), c.key, describe(d))
				}
			}
			if d := e.peek(p, "never-seen"); !e.check(`Peek("never-seen") after Reset`, p.Policy(), d, allow(5, 0)) {
				return
			}
		})
	}
}

// testKeyIsolation checks that keys never share state: different keys
// under one policy, one key under policies of different names, one name
// with different limits, and names and keys that a store joining them with
// a separator could confuse.
func (s *suite) testKeyIsolation(t *testing.T) {
	keys := []string{
		"", "a", "A", "a ", " a", "a\x00", "a\x00b", "a:b", "a|b", "a{b}", "{a}", "a*", "a?", "a/b", `a\b`,
		"ключ", "🔑", "\xff\xfe", strings.Repeat("k", 1000), strings.Repeat("k", 999) + "l",
	}
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			t.Run("keys", func(t *testing.T) {
				e := s.env(t)
				lim := e.limiter(limit(alg, 2, time.Hour))
				for i, k := range keys {
					for _, other := range keys[i:] {
						if d := e.peek(lim, other); !d.Allowed || d.Remaining != 2 {
							t.Fatalf("after exhausting %q: Peek(%q) = %s, want allowed with 2 remaining", keys[:i], other, describe(d))
						}
					}
					if got := e.admitted(lim, k, 1, 3); got != 2 {
						t.Fatalf("key %q: admitted %d of 3, want 2", k, got)
					}
				}
			})
			t.Run("policy_names", func(t *testing.T) {
				e := s.env(t)
				l := limit(alg, 2, time.Hour)
				p, q := e.limiter(l), e.limiter(l)
				if got := e.admitted(p, "k", 1, 3); got != 2 {
					t.Fatalf("admitted %d of 3, want 2", got)
				}
				if got := e.admitted(q, "k", 1, 3); got != 2 {
					t.Errorf("the same key under another policy name: admitted %d of 3, want 2", got)
				}
			})
			t.Run("same_name", func(t *testing.T) {
				// Policies of the same name share state: an equal
				// one built again, and one whose limit changed, which
				// carries the usage (see testCarry).
				e := s.env(t)
				p := e.policy(limit(alg, 2, time.Hour))
				same, err := sluice.NewPolicy(p.Name(), limit(alg, 2, time.Hour))
				if err != nil {
					t.Fatal(err)
				}
				changed, err := sluice.NewPolicy(p.Name(), limit(alg, 3, time.Hour))
				if err != nil {
					t.Fatal(err)
				}
				if got := e.admitted(e.limiterOf(p), "k", 1, 3); got != 2 {
					t.Fatalf("admitted %d of 3, want 2", got)
				}
				if got := e.admitted(e.limiterOf(same), "k", 1, 3); got != 0 {
					t.Errorf("an equal policy built again: admitted %d of 3, want 0 (its state is shared)", got)
				}
				if got := e.admitted(e.limiterOf(changed), "k", 1, 4); got != 1 {
					t.Errorf("the same name with a changed limit: admitted %d of 4, want 1 (the 2 used are carried)", got)
				}
			})
			t.Run("separators", func(t *testing.T) {
				// For each separator, two (policy, key) pairs that
				// join to the same string: name and key, the policy's
				// ID and key, or key and name.
				e := s.env(t)
				l := limit(alg, 2, time.Hour)
				for _, sep := range []string{":", "|", "/", "#", ".", "-", "_", " ", "{", "}", ","} {
					probe := e.policy(l) // the suffix a policy's ID adds to its name
					suffix := strings.TrimPrefix(storekit.Of(probe).ID(0), probe.Name())
					u := e.policy(l).Name()
					type pair struct {
						name, key string
					}
					for _, c := range [][2]pair{
						// name1+sep+key1 == name2+sep+key2.
						{{u, "a" + sep + "b"}, {u + sep + "a", "b"}},
						// ID(name1)+sep+key1 == ID(name2)+sep+key2.
						{{u, "k" + suffix + sep + "z"}, {u + sep + "k", "z"}},
						// key1+sep+name1 == key2+sep+name2.
						{{"m" + sep + u, "k"}, {u, "k" + sep + "m"}},
					} {
						p1, err1 := sluice.NewPolicy(c[0].name, l)
						p2, err2 := sluice.NewPolicy(c[1].name, l)
						if err1 != nil || err2 != nil {
							t.Fatal(err1, err2)
						}
						if got := e.admitted(e.limiterOf(p1), c[0].key, 1, 3); got != 2 {
							t.Fatalf("policy %q key %q: admitted %d of 3, want 2", c[0].name, c[0].key, got)
						}
						if got := e.admitted(e.limiterOf(p2), c[1].key, 1, 3); got != 2 {
							t.Errorf("policy %q key %q after exhausting policy %q key %q: admitted %d of 3, want 2",
								c[1].name, c[1].key, c[0].name, c[0].key, got)
						}
					}
				}
			})
		})
	}
}

// testExpiry checks that once ResetAfter has passed a key is
// indistinguishable from a fresh one, and that just before it is not.
func (s *suite) testExpiry(t *testing.T) {
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			for _, u := range usages {
				t.Run(u.name, func(t *testing.T) {
					e := s.env(t)
					lim := e.limiter(limit(alg, 5, s1))
					var last sluice.Decision
					for _, r := range u.u {
						e.at(r.at)
						if d := e.take(lim, "used", r.n); d.Allowed {
							last = d
						}
					}
					start := last.Time.Sub(epoch)
					if last.ResetAfter <= 0 {
						t.Fatalf("the last admitted request has ResetAfter %v, want more than 0", last.ResetAfter)
					}
					// Just before: some state remains.
					before := max(last.ResetAfter-s.res, 0) / us * us
					e.at(start + before)
					if d := e.peek(lim, "used"); d.Allowed && d.Remaining == 5 {
						t.Errorf("Peek %v after a decision with ResetAfter %v = %s, want the key not yet fresh", before, last.ResetAfter, describe(d))
					}
					e.at(start + ceil(last.ResetAfter))
					// Probe both keys alike from here on.
					base := e.now()
					for _, p := range []struct {
						at time.Duration
						n  int64
					}{{0, 1}, {0, 4}, {0, 1}, {250 * ms, 2}, {999 * ms, 5}, {s1, 3}} {
						e.at(base + p.at)
						if a, b := e.peek(lim, "used"), e.peek(lim, "fresh"); !s.same(a, b) {
							t.Fatalf("+%v after ResetAfter: Peek = %s, want %s as for a fresh key", p.at, describe(a), describe(b))
						}
						if a, b := e.take(lim, "used", p.n), e.take(lim, "fresh", p.n); !s.same(a, b) {
							t.Fatalf("+%v after ResetAfter: AllowN(%d) = %s, want %s as for a fresh key", p.at, p.n, describe(a), describe(b))
						}
					}
				})
			}
		})
	}
}
