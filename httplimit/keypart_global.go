package httplimit

// SourceGlobal is the "global" key part: one key shared by every request.
const SourceGlobal Source = 8

// Global is the key part shared by every request.
func Global() KeyPart { return KeyPart{Source: SourceGlobal} }

func init() {
	register(SourceGlobal, &keySource{
		name:    "global",
		tag:     'g',
		value:   func(*request, string) (string, bool) { return "", true },
		noValue: true,
		notTier: "every request has the same one",
		notList: "every request has the same one",
	})
}
