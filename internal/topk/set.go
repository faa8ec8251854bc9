package topk

import (
	"slices"
	"sync"
	"time"
)

// Set holds the sketches of named rules, made on first use. Names come
// from configurations (rule names, the rate-limit service's descriptor
// names), never from requests, so a set stays as large as the rules are
// many. A Set is safe for concurrent use; its zero value is empty and
// ready.
type Set struct {
	m  sync.Map // name -> *Sketch
	mu sync.Mutex
	// now is the time of the last Tick, for the sketches made after it.
	now time.Time
}

// Sketch returns the sketch of name, made if it has none.
func (s *Set) Sketch(name string) *Sketch {
	if k, ok := s.m.Load(name); ok {
		return k.(*Sketch)
	}
	s.mu.Lock()
	now := s.now
	s.mu.Unlock()
	if now.IsZero() {
		now = time.Now()
	}
	k, _ := s.m.LoadOrStore(name, New(now))
	return k.(*Sketch)
}

// Lookup returns the sketch of name, if it has one.
func (s *Set) Lookup(name string) (*Sketch, bool) {
	k, ok := s.m.Load(name)
	if !ok {
		return nil, false
	}
	return k.(*Sketch), true
}

// Names returns the names that have sketches, sorted.
func (s *Set) Names() []string {
	var out []string
	s.m.Range(func(k, _ any) bool {
		out = append(out, k.(string))
		return true
	})
	slices.Sort(out)
	return out
}

// Retain forgets the sketches of the names that keep does not report true
// for, such as rules a new configuration no longer has.
func (s *Set) Retain(keep func(name string) bool) {
	s.m.Range(func(k, _ any) bool {
		if !keep(k.(string)) {
			s.m.Delete(k)
		}
		return true
	})
}

// Tick moves every sketch's clock to now (see Sketch.Tick).
func (s *Set) Tick(now time.Time) {
	s.mu.Lock()
	s.now = now
	s.mu.Unlock()
	s.m.Range(func(_, k any) bool {
		k.(*Sketch).Tick(now)
		return true
	})
}
