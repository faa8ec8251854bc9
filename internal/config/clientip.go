package config

import (
	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/clientip"
)

// clientIPFields are the fields of client_ip.
var clientIPFields = []string{"trusted_proxies", "header", "ipv4_prefix", "ipv6_prefix"}

func (d *decoder) clientIP(n *yaml.Node, o *clientip.Options) {
	d.fields(n, "client_ip", clientIPFields, func(key string, v *yaml.Node) {
		p := "client_ip." + key
		switch key {
		case "trusted_proxies":
			pp, _ := d.prefixes(v, p)
			o.TrustedProxies = append(o.TrustedProxies, pp...)
		case "header":
			if h, ok := d.str(v, p); ok {
				if _, err := clientip.New(clientip.Options{Header: h}); err != nil {
					d.add(v, p, "want X-Forwarded-For, Forwarded or X-Real-IP, got %q", h)
					return
				}
				o.Header = h
			}
		case "ipv4_prefix":
			if b, ok := d.integer(v, p, 1, 32); ok {
				o.IPv4Prefix = int(b)
			}
		case "ipv6_prefix":
			if b, ok := d.integer(v, p, 1, 128); ok {
				o.IPv6Prefix = int(b)
			}
		}
	})
}
