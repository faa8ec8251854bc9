package httplimit

import (
	"net/url"
	"path"
	"strings"
	"testing"
)

// FuzzQueryValue holds queryValue, which reads one parameter without
// parsing the whole query, to net/url: for every parameter name a rule
// accepts, wherever url.ParseQuery accepts the query, queryValue returns the
// parameter's first value, and a parameter whose first value is empty
// counts as missing.
func FuzzQueryValue(f *testing.F) {
	for _, s := range [][2]string{
		{"key=abc", "key"},
		{"a=1&key=2&key=3", "key"},
		{"k%65y=x%20y&key=z", "key"},
		{"key=a+b", "key"},
		{"key=&key=2", "key"},
		{"key", "key"},
		{"=x&key=%zz", "key"},
		{"a%3Db=c", "a=b"},
		{"key=1;key=2", "key"},
		{"%", "%"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, raw, name string) {
		if (KeyPart{Source: SourceQuery, Name: name}).validate() != nil {
			return // no rule reads such a parameter
		}
		got, ok := queryValue(raw, name)
		if ok && got == "" {
			t.Fatalf("queryValue(%q, %q) found an empty value", raw, name)
		}
		vals, err := url.ParseQuery(raw)
		if err != nil {
			return // net/url rejects the query; queryValue need only not crash
		}
		want := vals.Get(name)
		if got != want || ok != (want != "") {
			t.Fatalf("queryValue(%q, %q) = %q, %v; net/url's first value is %q", raw, name, got, ok, want)
		}
	})
}

// FuzzKeyInjective checks that composite keys never collide: two keys built
// from parts that differ are different, so that no client can choose values
// that land on another client's counter.
func FuzzKeyInjective(f *testing.F) {
	f.Add("a:b", "c", "a", "b:c")
	f.Add("xq", "y", "x", "qy") // collide if a part's end is not marked
	f.Add("1:", "x", "1", ":x")
	f.Add("", "5:abcde", "5:abcde", "")
	f.Add(strings.Repeat("x", MaxValueLen+1), "", strings.Repeat("x", MaxValueLen+2), "")
	f.Fuzz(func(t *testing.T, a, b, c, d string) {
		k1 := string(appendValue(appendValue(nil, 'h', a), 'q', b))
		k2 := string(appendValue(appendValue(nil, 'h', c), 'q', d))
		if k1 == k2 && (a != c || b != d) {
			t.Fatalf("parts (%q, %q) and (%q, %q) make the same key %q", a, b, c, d, k1)
		}
		if len(k1) > 2*(MaxValueLen+8) {
			t.Fatalf("key of %d bytes from values of %d and %d bytes, want values beyond %d bytes digested", len(k1), len(a), len(b), MaxValueLen)
		}
	})
}

// TestIsClean holds isClean, which lets a path skip path.Clean, to
// path.Clean over every string of up to nine of '/', '.' and 'a': a path it
// finds clean is one path.Clean leaves as it is, and an absolute path
// path.Clean leaves as it is, with no element starting with '.', it finds
// clean.
func TestIsClean(t *testing.T) {
	var walk func(p string, n int)
	walk = func(p string, n int) {
		cleaned := strings.HasPrefix(p, "/") && path.Clean(p) == p
		switch {
		case isClean(p) && !cleaned:
			t.Errorf("isClean(%q) = true; path.Clean gives %q", p, path.Clean(p))
		case !isClean(p) && cleaned && !strings.Contains(p, "/."):
			t.Errorf("isClean(%q) = false; path.Clean leaves it as it is", p)
		}
		if n > 0 {
			for _, c := range "/.a" {
				walk(p+string(c), n-1)
			}
		}
	}
	walk("", 9)
}
