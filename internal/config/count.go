package config

import (
	"fmt"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/httplimit"
)

// countFields are the fields of a rule's count (rules[].count).
var countFields = []string{"status", "header", "mode"}

// count decodes a rule's count: { status: [401, 4xx], header: Sluice-Count,
// mode: after|reserve }. A single status may be written without the list.
func (d *decoder) count(n *yaml.Node, path string) *httplimit.CountOn {
	c := &httplimit.CountOn{}
	d.fields(n, path, countFields, func(key string, v *yaml.Node) {
		p := path + "." + key
		switch key {
		case "status":
			v = resolve(v)
			items := []*yaml.Node{v}
			if v.Kind == yaml.SequenceNode {
				items = v.Content
				if len(items) == 0 {
					d.add(v, p, "want at least one status, such as [401, 4xx]")
				}
			}
			for i, e := range items {
				ip := p
				if v.Kind == yaml.SequenceNode {
					ip = fmt.Sprintf("%s[%d]", p, i)
				}
				s, ok := d.str(e, ip)
				if !ok {
					continue
				}
				code, class, err := parseStatus(s)
				switch {
				case err != nil:
					d.add(e, ip, "%v", err)
				case class > 0:
					c.Classes = append(c.Classes, class)
				default:
					c.Statuses = append(c.Statuses, code)
				}
			}
		case "header":
			if s, ok := d.nonEmpty(v, p, `want a header name such as Sluice-Count, got ""`); ok {
				c.Header = s // the rule's validation checks the name
			}
		case "mode":
			if s, ok := d.str(v, p); ok {
				m, err := httplimit.ParseCountMode(s)
				if err != nil {
					d.add(v, p, "want after or reserve, got %q", s)
					return
				}
				c.Mode = m
			}
		}
	})
	if resolve(n).Kind == yaml.MappingNode && len(c.Statuses) == 0 && len(c.Classes) == 0 && c.Header == "" {
		d.add(n, path, "want a status (such as [401, 4xx]) or a header (such as Sluice-Count) to count by")
	}
	return c
}

// parseStatus parses a status to count by: a code from 100 to 599 ("401"),
// or a class ("4xx", any case), returned as its first digit.
func parseStatus(s string) (code, class int, err error) {
	if len(s) == 3 && (s[1] == 'x' || s[1] == 'X') && (s[2] == 'x' || s[2] == 'X') {
		if s[0] < '1' || s[0] > '5' {
			return 0, 0, fmt.Errorf("status class %q: want 1xx to 5xx", s)
		}
		return 0, int(s[0] - '0'), nil
	}
	n, perr := strconv.Atoi(s)
	if perr != nil || len(s) != 3 || n < 100 || n > 599 {
		return 0, 0, fmt.Errorf("status %q: want a code from 100 to 599 or a class such as 4xx", s)
	}
	return n, 0, nil
}

// checkCountForwardAuth reports the rules, all valid, that count by outcome
// in a file that enables forward-auth: the proxy in front asks Sluice
// before it forwards a request and never shows it the response, so such a
// rule would never count anything there.
func (d *decoder) checkCountForwardAuth(rulesNode *yaml.Node, rules []httplimit.Rule) {
	nodes := resolve(rulesNode).Content
	for i, r := range rules {
		if i >= len(nodes) {
			continue
		}
		if r.Concurrency != nil {
			d.add(lookup(nodes[i], "concurrency"), fmt.Sprintf("rules[%d].concurrency", i), "a concurrency rule holds a slot until the response ends; forward-auth (server.forward_auth) never sees it end, so the slot would be given back at once")
		}
		if r.Count == nil {
			continue
		}
		d.add(lookup(nodes[i], "count"), fmt.Sprintf("rules[%d].count", i), "counting by outcome needs the gateway to see the response; forward-auth (server.forward_auth) never does, so this rule would never count")
	}
}
