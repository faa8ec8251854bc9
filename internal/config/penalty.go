package config

import (
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
)

// penaltyFields are the fields of a rule's penalty (rules[].penalty).
var penaltyFields = []string{"after", "blocks", "forget"}

// penalty decodes a rule's penalty: { after: 1, blocks: [1m, 10m, 1h],
// forget: 24h }. A single block may be written without the list.
func (d *decoder) penalty(n *yaml.Node, path string) *sluice.Penalty {
	pen := &sluice.Penalty{}
	hasBlocks, hasForget := false, false
	d.fields(n, path, penaltyFields, func(key string, v *yaml.Node) {
		p := path + "." + key
		switch key {
		case "after":
			if a, ok := d.integer(v, p, 1, 1_000_000); ok {
				pen.After = int(a)
			}
		case "blocks":
			hasBlocks = true
			v = resolve(v)
			items := []*yaml.Node{v}
			if v.Kind == yaml.SequenceNode {
				items = v.Content
				if len(items) == 0 || len(items) > sluice.MaxPenaltyBlocks {
					d.add(v, p, "want 1 to %d durations, such as [1m, 10m, 1h], got %d", sluice.MaxPenaltyBlocks, len(items))
					return
				}
			}
			for i, e := range items {
				ip := p
				if v.Kind == yaml.SequenceNode {
					ip = fmt.Sprintf("%s[%d]", p, i)
				}
				if b, ok := d.duration(e, ip, time.Millisecond, 366*24*time.Hour); ok {
					pen.Blocks = append(pen.Blocks, b)
				}
			}
		case "forget":
			hasForget = true
			if f, ok := d.duration(v, p, time.Millisecond, 366*24*time.Hour); ok {
				pen.Forget = f
			}
		}
	})
	if resolve(n).Kind == yaml.MappingNode {
		if !hasBlocks {
			d.add(n, path+".blocks", "missing: a penalty needs blocks, such as [1m, 10m, 1h]")
		}
		if !hasForget {
			d.add(n, path+".forget", "missing: a penalty needs forget, the quiet period after which offences are forgotten, such as 24h")
		}
	}
	return pen
}
