package accesslist

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"unicode/utf8"
)

// MaxLineLen is the longest line a list file may have, in bytes.
const MaxLineLen = 4096

// maxProblems is how many bad lines a ParseError lists before giving up.
const maxProblems = 20

// ErrSyntax is wrapped by every ParseError.
var ErrSyntax = errors.New("accesslist: bad list file")

// LineProblem is one bad line of a list file.
type LineProblem struct {
	Line    int // 1-based
	Message string
}

// ParseError lists the bad lines of a list file (at most 20). It wraps
// ErrSyntax.
type ParseError struct {
	Problems []LineProblem
}

func (e *ParseError) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "line %d: %s", p.Line, p.Message)
	}
	return b.String()
}

func (e *ParseError) Unwrap() error { return ErrSyntax }

// ParseNetwork parses one entry of a network list: a CIDR ("10.0.0.0/8",
// "2001:db8::/32") or a bare address (one host: a /32 or /128). Bits
// beyond the prefix length must be zero, so that a typo such as
// 10.1.0.0/8 (meaning 10.1.0.0/16?) is caught rather than widened.
func ParseNetwork(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("accesslist: %q is not a CIDR such as 192.0.2.0/24 or 2001:db8::/32", s)
		}
		if p.Masked() != p {
			return netip.Prefix{}, fmt.Errorf("accesslist: %q has bits set beyond its /%d; did you mean %s?", s, p.Bits(), p.Masked())
		}
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("accesslist: %q is not an IP address or CIDR", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// ParseNetworks reads a network list: one CIDR or address a line (see
// ParseNetwork), blank lines and comments from # to the end of the line
// ignored. Bad lines are reported in a *ParseError; a list without entries
// is ErrEmpty.
func ParseNetworks(r io.Reader) (*IPSet, error) {
	var ps []netip.Prefix
	err := scan(r, true, func(s string) error {
		p, err := ParseNetwork(s)
		if err != nil {
			return err
		}
		ps = append(ps, p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(ps) == 0 {
		return nil, ErrEmpty
	}
	return NewIPSet(ps)
}

// ParseKeys reads a key list: one key a line, surrounding white space
// removed; blank lines and lines starting with # are ignored (a # later in
// a line is part of the key). Keys must be valid UTF-8 without control
// characters. Bad lines are reported in a *ParseError; a list without
// entries is ErrEmpty.
func ParseKeys(r io.Reader) (*KeySet, error) {
	var ks []string
	err := scan(r, false, func(s string) error {
		if err := CheckKey(s); err != nil {
			return err
		}
		ks = append(ks, s)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(ks) == 0 {
		return nil, ErrEmpty
	}
	return NewKeySet(ks), nil
}

// CheckKey reports whether s can be a key list's entry: non-empty, valid
// UTF-8, no control characters, no surrounding white space (a request's
// header value never has any).
func CheckKey(s string) error {
	switch {
	case s == "":
		return errors.New("accesslist: empty key")
	case !utf8.ValidString(s):
		return fmt.Errorf("accesslist: key %q is not valid UTF-8", s)
	case strings.TrimSpace(s) != s:
		return fmt.Errorf("accesslist: key %q has surrounding white space", s)
	}
	for _, c := range s {
		if c < ' ' || c == 0x7f {
			return fmt.Errorf("accesslist: key %q has a control character", s)
		}
	}
	return nil
}

// scan calls f with each entry of a list file, collecting the lines it
// rejects. trailing allows comments after an entry.
func scan(r io.Reader, trailing bool, f func(string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, MaxLineLen+2), MaxLineLen+2)
	var pe ParseError
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if trailing {
			if i := strings.IndexByte(s, '#'); i >= 0 {
				s = strings.TrimSpace(s[:i])
			}
		}
		if s == "" || s[0] == '#' {
			continue
		}
		if err := f(s); err != nil {
			pe.Problems = append(pe.Problems, LineProblem{line, strings.TrimPrefix(err.Error(), "accesslist: ")})
			if len(pe.Problems) == maxProblems {
				break
			}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			pe.Problems = append(pe.Problems, LineProblem{line + 1, fmt.Sprintf("line longer than %d bytes", MaxLineLen)})
		} else {
			return fmt.Errorf("accesslist: %w", err)
		}
	}
	if len(pe.Problems) > 0 {
		return &pe
	}
	return nil
}
