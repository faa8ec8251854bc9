package httplimit

// SourceCookie is the "cookie:NAME" key part: the value of a cookie.
const SourceCookie Source = 4

// Cookie is the key part of a cookie.
func Cookie(name string) KeyPart { return KeyPart{Source: SourceCookie, Name: name} }

func init() {
	register(SourceCookie, &keySource{
		name:      "cookie",
		tag:       'c',
		named:     true,
		checkName: checkToken("cookie"),
		value: func(q *request, name string) (string, bool) {
			c, err := q.r.Cookie(name)
			if err != nil || c.Value == "" {
				return "", false
			}
			return c.Value, true
		},
	})
}
