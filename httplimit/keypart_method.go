package httplimit

// SourceMethod is the "method" key part: the request method.
const SourceMethod Source = 5

// Method is the key part of the request method.
func Method() KeyPart { return KeyPart{Source: SourceMethod} }

func init() {
	register(SourceMethod, &keySource{
		name:  "method",
		tag:   'm',
		value: func(q *request, _ string) (string, bool) { return q.r.Method, true },
	})
}
