package httplimit

import (
	"fmt"
	"net/url"
	"strings"
)

// SourceQuery is the "query:NAME" key part: the first value of a URL query
// parameter.
const SourceQuery Source = 3

// Query is the key part of a URL query parameter.
func Query(name string) KeyPart { return KeyPart{Source: SourceQuery, Name: name} }

func init() {
	register(SourceQuery, &keySource{
		name:  "query",
		tag:   'q',
		named: true,
		checkName: func(name string) error {
			if name == "" || len(name) > 256 {
				return fmt.Errorf("query parameter name %q must be 1 to 256 bytes", name)
			}
			return nil
		},
		value: func(q *request, name string) (string, bool) { return queryValue(q.r.URL.RawQuery, name) },
	})
}

// queryValue returns the first value of parameter name in a raw query
// without parsing (and allocating for) the whole query.
func queryValue(raw, name string) (string, bool) {
	for raw != "" {
		var kv string
		kv, raw, _ = strings.Cut(raw, "&")
		k, v, _ := strings.Cut(kv, "=")
		if k != name {
			if !strings.ContainsAny(k, "%+") {
				continue
			}
			uk, err := url.QueryUnescape(k)
			if err != nil || uk != name {
				continue
			}
		}
		if strings.ContainsAny(v, "%+") {
			uv, err := url.QueryUnescape(v)
			if err != nil {
				return "", false
			}
			v = uv
		}
		if v == "" {
			return "", false
		}
		return v, true
	}
	return "", false
}
