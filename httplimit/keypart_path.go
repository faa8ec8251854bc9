package httplimit

// SourcePath is the "path" key part: the URL path as rules match it:
// cleaned, and lower-cased unless Options.CaseSensitivePaths, so that every
// spelling of a path that a rule matches as one shares one counter.
const SourcePath Source = 6

// Path is the key part of the URL path.
func Path() KeyPart { return KeyPart{Source: SourcePath} }

func init() {
	register(SourcePath, &keySource{
		name:  "path",
		tag:   'p',
		value: func(q *request, _ string) (string, bool) { return q.path, true },
		given: func(l *Limiter, dst []byte, v string) ([]byte, error) {
			if v == "" {
				return dst, errEmptyValue(Path())
			}
			if v = cleanPath(v); !l.caseSensitive {
				v = lowerPath(v)
			}
			return appendValue(dst, 'p', v), nil
		},
	})
}
