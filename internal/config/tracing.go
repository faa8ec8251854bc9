package config

import (
	"net/url"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// Tracing is the tracing section: OpenTelemetry spans over OTLP/HTTP.
type Tracing struct {
	// Endpoint is the collector's http(s) URL. Required.
	Endpoint string
	// SampleRatio is the share of requests without a caller's trace that
	// are traced, 0 to 1. Default 0.01.
	SampleRatio float64
	// ServiceName is the spans' service.name. Default "sluice".
	ServiceName string
}

// tracingFields are the fields of tracing.
var tracingFields = []string{"endpoint", "sample_ratio", "service_name"}

func (d *decoder) tracing(n *yaml.Node) *Tracing {
	t := &Tracing{SampleRatio: 0.01, ServiceName: "sluice"}
	seen := false
	d.fields(n, "tracing", tracingFields, func(k string, v *yaml.Node) {
		p := "tracing." + k
		switch k {
		case "endpoint":
			s, ok := d.str(v, p)
			if !ok {
				return
			}
			if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				d.add(v, p, "want the collector's http:// or https:// URL, such as http://127.0.0.1:4318, got %q", s)
				return
			}
			t.Endpoint, seen = s, true
		case "sample_ratio":
			v = resolve(v)
			r, err := strconv.ParseFloat(v.Value, 64)
			if v.Kind != yaml.ScalarNode || (v.Tag != "!!float" && v.Tag != "!!int") || err != nil || r < 0 || r > 1 {
				d.add(v, p, "want a number from 0 to 1, got %s", found(v))
				return
			}
			t.SampleRatio = r
		case "service_name":
			if s, ok := d.nonEmpty(v, p, "want a name, such as sluice-edge"); ok {
				t.ServiceName = s
			}
		}
	})
	if !seen {
		d.add(n, "tracing.endpoint", "want the collector's URL, such as http://127.0.0.1:4318: tracing needs an endpoint")
	}
	return t
}
