package config

import (
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/httplimit"
)

// tiersFields are the fields of tiers.
var tiersFields = []string{"from", "default", "keys"}

func (d *decoder) tiers(n *yaml.Node, t *httplimit.Tiers) {
	d.fields(n, "tiers", tiersFields, func(key string, v *yaml.Node) {
		p := "tiers." + key
		switch key {
		case "from":
			if s, ok := d.str(v, p); ok {
				k, err := httplimit.ParseKeyPart(s)
				switch {
				case err != nil:
					d.add(v, p, "%s", strings.TrimPrefix(err.Error(), httplimit.ErrInvalidRule.Error()+": "))
				case k.Source == httplimit.SourceGlobal:
					d.add(v, p, "a tier cannot come from global")
				default:
					t.From = k
				}
			}
		case "default":
			if s, ok := d.str(v, p); ok {
				if !validName(s) {
					d.add(v, p, "want 1 to 64 characters from A-Z a-z 0-9 . _ -, got %q", s)
					return
				}
				t.Default = s
			}
		case "keys":
			v = resolve(v)
			if v.Kind != yaml.MappingNode {
				d.add(v, p, "want a mapping from a value (such as an API key) to a tier name, got %s", found(v))
				return
			}
			t.Keys = make(map[string]string, len(v.Content)/2)
			for i := 0; i+1 < len(v.Content); i += 2 {
				k, tv := v.Content[i], v.Content[i+1]
				tier, ok := d.str(tv, p+"."+k.Value)
				if !ok {
					continue
				}
				if !validName(tier) {
					d.add(tv, p+"."+k.Value, "tier name %q: want 1 to 64 characters from A-Z a-z 0-9 . _ -", tier)
				}
				if _, dup := t.Keys[k.Value]; dup {
					d.add(k, p+"."+k.Value, "appears twice")
				}
				t.Keys[k.Value] = tier
			}
		}
	})
	if t.Keys != nil && t.From == (httplimit.KeyPart{}) {
		d.add(n, "tiers.keys", "needs tiers.from: the request attribute (such as header:X-API-Key) to look up")
	}
}
