package config

import (
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/server/backend"
	"github.com/sluicehq/sluice/redisstore"
)

// Store is the store section: the backend, and the settings it opens
// with (backend.Settings: MaxKeys, Redis, ...).
type Store struct {
	// Backend is store.backend, the name of a backend of package
	// backend: "memory" (the default) or "redis".
	Backend string
	backend.Settings
}

// storeFields are the fields of store that do not depend on the backends:
// storeKeys adds each backend's own section.
var storeFields = []string{"backend", "max_keys", "on_error"}

// storeKeys returns the fields of store in the order messages list them:
// backend, max_keys, the section of each backend that has options of its
// own (store.redis), then on_error.
func storeKeys() []string {
	keys := append([]string(nil), storeFields[:2]...)
	for _, b := range backend.All() {
		if len(b.Sections) > 0 {
			keys = append(keys, b.Name)
		}
	}
	return append(keys, storeFields[2:]...)
}

// storeSection is a backend's own section found in the store section.
type storeSection struct {
	name string // the backend's
	node *yaml.Node
}

// store decodes the store section, each backend's section of options
// with that backend's Decode, and returns those sections in the file's
// order.
func (d *decoder) store(n *yaml.Node, s *Store) []storeSection {
	var sections []storeSection
	d.fields(n, "store", storeKeys(), func(key string, v *yaml.Node) {
		p := "store." + key
		switch key {
		case "backend":
			if b, ok := d.str(v, p); ok {
				if _, ok := backend.Lookup(b); !ok {
					d.add(v, p, "want %s, got %q", backend.Choices(), b)
					return
				}
				s.Backend = b
			}
		case "max_keys":
			if m, ok := d.integer(v, p, 1, 1_000_000_000); ok {
				s.MaxKeys = int(m)
			}
		case "on_error":
			// What a decision does when the store fails to decide: the
			// failure policy of redisstore, the only backend that can.
			if f, ok := d.str(v, p); ok {
				fl, err := redisstore.ParseFailure(f)
				if err != nil {
					d.add(v, p, "want allow, deny or local, got %q", f)
					return
				}
				s.Redis.OnError = fl
			}
		default: // a backend's own section, as storeKeys lists them
			b, _ := backend.Lookup(key)
			sections = append(sections, storeSection{key, v})
			b.Decode(sectionDecoder{d}, v, &s.Settings)
		}
	})
	return sections
}

// checkBackend reports, once the file is read, a section of options for a
// backend other than the chosen one, and the chosen backend's section
// missing where it needs one. storeNode is the store section (nil for
// none).
func (d *decoder) checkBackend(storeNode *yaml.Node, b backend.Backend, sections []storeSection) {
	has := false
	for _, sec := range sections {
		if sec.name == b.Name {
			has = true
			continue
		}
		d.add(sec.node, "store."+sec.name, "only for backend %s; the backend is %s", sec.name, b.Name)
	}
	if !has && b.Needs != "" {
		d.add(storeNode, "store."+b.Name, "missing: the %s backend needs %s", b.Name, b.Needs)
	}
}

// sectionDecoder lends the decoder to a backend for its own sections.
type sectionDecoder struct{ d *decoder }

var _ backend.Decoder = sectionDecoder{}

func (s sectionDecoder) Fields(n *yaml.Node, sec backend.Section, each func(key string, v *yaml.Node)) {
	s.d.fields(n, sec.Path, sec.Fields, each)
}

func (s sectionDecoder) Problem(n *yaml.Node, path, format string, args ...any) {
	s.d.add(n, path, format, args...)
}

func (sectionDecoder) Resolve(n *yaml.Node) *yaml.Node { return resolve(n) }

func (s sectionDecoder) String(n *yaml.Node, path string) (string, bool) { return s.d.str(n, path) }

func (s sectionDecoder) Strings(n *yaml.Node, path string) ([]string, bool) {
	return s.d.strings(n, path, false)
}

func (s sectionDecoder) Integer(n *yaml.Node, path string, lo, hi int64) (int64, bool) {
	return s.d.integer(n, path, lo, hi)
}

func (s sectionDecoder) Duration(n *yaml.Node, path string, lo, hi time.Duration) (time.Duration, bool) {
	return s.d.duration(n, path, lo, hi)
}

func (s sectionDecoder) Bool(n *yaml.Node, path string) (bool, bool) { return s.d.boolean(n, path) }

// Percent reports its problems at n as given (an alias where it is used),
// with ParsePercent's words.
func (s sectionDecoder) Percent(n *yaml.Node, path, of string) (float64, bool) {
	vn := resolve(n)
	if vn.Kind != yaml.ScalarNode || vn.Tag == "!!null" {
		s.d.add(n, path, "want a percentage of %s, got %s", of, found(n))
		return 0, false
	}
	f, err := ParsePercent(vn.Value)
	if err != nil {
		s.d.add(n, path, "%s", strings.TrimPrefix(err.Error(), ErrPercent.Error()+": "))
		return 0, false
	}
	return f, true
}
