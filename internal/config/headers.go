package config

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/httplimit"
)

func (d *decoder) headers(n *yaml.Node) httplimit.Headers {
	ss, ok := d.strings(n, "headers", false)
	if !ok {
		return httplimit.HeadersIETF | httplimit.HeadersLegacy
	}
	var h httplimit.Headers
	for i, s := range ss {
		switch strings.ToLower(s) {
		case "ietf":
			h |= httplimit.HeadersIETF
		case "legacy":
			h |= httplimit.HeadersLegacy
		default:
			d.add(resolve(n).Content[i], fmt.Sprintf("headers[%d]", i), "want ietf or legacy, got %q", s)
		}
	}
	if h == 0 {
		h = httplimit.HeadersNone
	}
	return h
}
