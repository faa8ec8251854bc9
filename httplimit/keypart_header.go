package httplimit

import "net/textproto"

// SourceHeader is the "header:NAME" key part: the first value of a request
// header.
const SourceHeader Source = 2

// Header is the key part of a request header.
func Header(name string) KeyPart {
	return KeyPart{Source: SourceHeader, Name: textproto.CanonicalMIMEHeaderKey(name)}
}

func init() {
	register(SourceHeader, &keySource{
		name:      "header",
		tag:       'h',
		named:     true,
		checkName: checkToken("header"),
		canonical: textproto.CanonicalMIMEHeaderKey,
		value: func(q *request, name string) (string, bool) {
			v := q.r.Header[name]
			if len(v) == 0 || v[0] == "" {
				return "", false
			}
			return v[0], true
		},
	})
}
