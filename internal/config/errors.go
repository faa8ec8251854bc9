package config

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalid is wrapped by every error that reports problems in a file.
var ErrInvalid = errors.New("invalid config")

// Problem is one mistake in a file.
type Problem struct {
	Line, Column int    // 1-based; 0 when unknown
	Path         string // such as "rules[2].limit"
	Message      string
}

// Error lists every problem found in one file. It wraps ErrInvalid.
type Error struct {
	File     string
	Problems []Problem
}

func (e *Error) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.File)
		switch {
		case p.Line > 0 && p.Column > 0:
			fmt.Fprintf(&b, ":%d:%d", p.Line, p.Column)
		case p.Line > 0:
			fmt.Fprintf(&b, ":%d", p.Line)
		}
		b.WriteString(": ")
		if p.Path != "" {
			b.WriteString(p.Path + ": ")
		}
		b.WriteString(p.Message)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return ErrInvalid }
