// Package luascript assembles the Redis store's Lua scripts from their
// pieces. Each routine the scripts share is written once, in a file of its
// own beside the scripts (package redisstore), and a script names the
// pieces it takes at markers; the store assembles every script it sends
// here, and so do the benchmarks that send the store's scripts to Redis
// themselves.
package luascript

import (
	"fmt"
	"io/fs"
	"slices"
	"strings"
)

// Assemble returns the script in the file name of fsys with every marker
// resolved. A marker is a line that says only --[[X]] (a Lua comment, so
// that each file is valid Lua on its own): --[[NAME.lua]] becomes the text
// of the file NAME.lua, itself assembled, and --[[decide]], in a script
// that wraps another, becomes decide, the assembled script it wraps. A
// piece put in inside a function or a branch is local to it. Assemble
// fails on a marker it cannot resolve (a missing file, --[[decide]] with
// decide empty, any other text) and on a file that includes itself.
func Assemble(fsys fs.FS, name, decide string) (string, error) {
	var b strings.Builder
	if err := put(&b, fsys, name, decide, nil); err != nil {
		return "", err
	}
	return b.String(), nil
}

// put writes the file name, assembled, to b; within are the files that
// include it, outermost first.
func put(b *strings.Builder, fsys fs.FS, name, decide string, within []string) error {
	if slices.Contains(within, name) {
		return fmt.Errorf("luascript: %s includes itself: %s", name, strings.Join(append(within, name), " > "))
	}
	src, err := fs.ReadFile(fsys, name)
	if err != nil {
		return fmt.Errorf("luascript: %w", err)
	}
	for line := range strings.Lines(string(src)) {
		marker, ok := strings.CutPrefix(strings.TrimSpace(line), "--[[")
		if ok {
			marker, ok = strings.CutSuffix(marker, "]]")
		}
		switch {
		case !ok:
			writeLine(b, line)
		case marker == "decide":
			if decide == "" {
				return fmt.Errorf("luascript: %s: no script to put at --[[decide]]", name)
			}
			writeLine(b, decide)
		case strings.HasSuffix(marker, ".lua"):
			if err := put(b, fsys, marker, decide, append(within, name)); err != nil {
				return err
			}
		default:
			return fmt.Errorf("luascript: %s: nothing to put at --[[%s]]", name, marker)
		}
	}
	return nil
}

// writeLine writes s to b and ends it with a newline if it has none, so
// that what follows starts on a line of its own.
func writeLine(b *strings.Builder, s string) {
	b.WriteString(s)
	if !strings.HasSuffix(s, "\n") {
		b.WriteByte('\n')
	}
}
