package config

import (
	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/httplimit"
)

// tiersFields are the fields of tiers.
var tiersFields = []string{"from", "client", "anchor", "default", "keys"}

func (d *decoder) tiers(n *yaml.Node, t *httplimit.Tiers) {
	d.fields(n, "tiers", tiersFields, func(key string, v *yaml.Node) {
		p := "tiers." + key
		switch key {
		case "from":
			d.tierPart(v, p, "a tier cannot come from global", &t.From)
		case "client":
			d.tierPart(v, p, "a client cannot be global: want the attribute that tells clients apart, such as jwt:sub", &t.Client)
		case "anchor":
			d.tierPart(v, p, "an anchor cannot come from global: want the attribute that carries each client's billing anchor, such as jwt:billing_anchor", &t.Anchor)
		case "default":
			if s, ok := d.str(v, p); ok {
				if err := httplimit.CheckName("tier", s); err != nil {
					d.add(v, p, "%s", reason(err))
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
				if err := httplimit.CheckName("tier", tier); err != nil {
					d.add(tv, p+"."+k.Value, "%s", reason(err))
				}
				if _, dup := t.Keys[k.Value]; dup {
					d.add(k, p+"."+k.Value, "appears twice")
				}
				t.Keys[k.Value] = tier
			}
		}
	})
	if t.Client != (httplimit.KeyPart{}) && t.From == (httplimit.KeyPart{}) {
		d.add(n, "tiers.client", "needs tiers.from: the request attribute that names the tier")
	}
	if t.Keys != nil && t.From == (httplimit.KeyPart{}) {
		d.add(n, "tiers.keys", "needs tiers.from: the request attribute (such as header:X-API-Key) to look up")
	}
}

// tierPart decodes tiers.from, tiers.client or tiers.anchor into k: a key part, not
// global (refused with notGlobal).
func (d *decoder) tierPart(v *yaml.Node, p, notGlobal string, k *httplimit.KeyPart) {
	s, ok := d.str(v, p)
	if !ok {
		return
	}
	part, err := httplimit.ParseKeyPart(s)
	switch {
	case err != nil:
		d.add(v, p, "%s", reason(err))
	case part.Source == httplimit.SourceGlobal:
		d.add(v, p, "%s", notGlobal)
	default:
		*k = part
	}
}
