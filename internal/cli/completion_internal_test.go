package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/replay"
)

func TestComplete(t *testing.T) {
	for _, tc := range []struct {
		words []string // after "sluice"; the last is under the cursor
		want  []string
		files bool
	}{
		{[]string{""}, []string{"serve", "check-config", "replay", "client", "key", "descriptor", "top", "version", "completion", "help"}, false},
		{[]string{"top", "--by", ""}, []string{"limited", "requests"}, false},
		{[]string{"top", "--o"}, []string{"--once"}, false},
		{[]string{"top", "--token-file", ""}, nil, true},
		{[]string{"c"}, []string{"check-config", "client", "completion"}, false},
		{[]string{"-"}, []string{"--version", "--help"}, false},
		{[]string{"nope", ""}, nil, false},
		{[]string{"serve", "--"}, []string{"--config", "--log-format", "--log-level", "--help"}, false},
		{[]string{"serve", "--config", ""}, nil, true},
		{[]string{"serve", "-config", "ex"}, nil, true},
		{[]string{"serve", "--config=ex"}, nil, true},
		{[]string{"serve", "--config", "=", "ex"}, nil, true},
		{[]string{"serve", "--config", "x.yaml", "--log-format", ""}, []string{"text", "json"}, false},
		{[]string{"serve", "--log-level", "=", "w"}, []string{"warn"}, false},
		{[]string{"serve", "--log-level=", ""}, nil, false},
		{[]string{"serve", "--log-level=d"}, []string{"--log-level=debug"}, false},
		{[]string{"serve", "--nope", ""}, nil, false},
		{[]string{"check-config", ""}, nil, true},
		{[]string{"check-config", "a.yaml", ""}, nil, false},
		{[]string{"replay", "--format", ""}, []string{"combined", "json", "envoy", "istio", "caddy"}, false},
		{[]string{"replay", "--html", ""}, nil, true},
		{[]string{"replay", "--config", "a.yaml", "access.log", ""}, nil, true},
		{[]string{"client", ""}, []string{"list", "show", "set-tier", "set-limit", "set-anchor", "remove"}, false},
		{[]string{"client", "--"}, []string{"--help"}, false},
		{[]string{"client", "nope", ""}, nil, false},
		{[]string{"client", "list", "--"}, []string{"--admin", "--json", "--token-file", "--help"}, false},
		{[]string{"client", "set-tier", "acme", "gold", "--u"}, []string{"--until"}, false},
		{[]string{"client", "set-limit", "--t"}, []string{"--timezone", "--token-file"}, false},
		{[]string{"client", "show", "--token-file", ""}, nil, true},
		{[]string{"client", "show", "--json", ""}, nil, false},
		{[]string{"key", "reset", "--rule", "login", "--c"}, []string{"--client"}, false},
		{[]string{"descriptor", "set-limit", "--"}, []string{"--admin", "--algorithm", "--burst", "--json", "--limit", "--period", "--token-file", "--until", "--help"}, false},
		{[]string{"descriptor", "show", "--", "--"}, nil, false},
		{[]string{"completion", ""}, []string{"bash", "zsh", "fish"}, false},
		{[]string{"completion", "bash", ""}, nil, false},
		{[]string{"help", "se"}, []string{"serve"}, false},
		{[]string{"help", "h"}, nil, false},
		{[]string{"help", "client", "set-"}, []string{"set-tier", "set-limit", "set-anchor"}, false},
		{[]string{"help", "serve", ""}, nil, false},
		{[]string{"help", "-"}, nil, false},
		{[]string{"version", ""}, nil, false},
		{[]string{"version", "--"}, []string{"--help"}, false},
	} {
		cands, files, _ := complete(tc.words)
		var got []string
		for _, c := range cands {
			got = append(got, c.word)
		}
		if !slices.Equal(got, tc.want) || files != tc.files {
			t.Errorf("complete(%q) = %q, files %v; want %q, files %v", tc.words, got, files, tc.want, tc.files)
		}
	}
}

// TestCompletePrefix checks the part of a --flag=value word that a file
// name completes after.
func TestCompletePrefix(t *testing.T) {
	if _, files, prefix := complete([]string{"serve", "--config=ex"}); !files || prefix != "--config=" {
		t.Errorf("--config=ex: files %v, prefix %q; want true, --config=", files, prefix)
	}
	if _, files, prefix := complete([]string{"serve", "--config", "ex"}); !files || prefix != "" {
		t.Errorf("--config ex: files %v, prefix %q; want true and none", files, prefix)
	}
}

// TestCommandTableMatchesTheCommands holds the completion table to the
// command line: every command of the usage and no other, every admin
// group with a description of each of its subcommands, every value
// offered accepted, and every command one that sluice runs and documents.
func TestCommandTableMatchesTheCommands(t *testing.T) {
	table := commandTable()
	var names []string
	for _, c := range table {
		names = append(names, c.name)
	}
	var inUsage []string
	for _, m := range regexp.MustCompile(`(?m)^  sluice ([a-z-]+)`).FindAllStringSubmatch(usage, -1) {
		inUsage = append(inUsage, m[1])
	}
	if !slices.Equal(names, inUsage) {
		t.Errorf("the completion table has the commands %q; the usage lists %q", names, inUsage)
	}

	described := map[string]bool{}
	for group, g := range adminGroups {
		c := findCommand(table, group)
		if c == nil || !slices.Equal(c.subs, g.subs) {
			t.Errorf("admin group %s: the completion table has %+v", group, c)
		}
		for _, sub := range g.subs {
			described[group+" "+sub] = true
			if subSummaries[group+" "+sub] == "" {
				t.Errorf("%s %s: no description", group, sub)
			}
		}
	}
	for key := range subSummaries {
		if !described[key] {
			t.Errorf("%s: described, but not an admin command", key)
		}
	}

	for _, c := range table {
		for name, values := range c.values {
			if c.flags == nil || c.flags("").Lookup(name) == nil {
				t.Errorf("%s: values for --%s, which is not defined", c.name, name)
			}
			for _, v := range values {
				var err error
				switch name {
				case "log-format":
					_, err = newLogger(io.Discard, v, "info")
				case "log-level":
					_, err = newLogger(io.Discard, "text", v)
				case "format":
					_, err = replay.ParseFormat(v)
				case "by", "window":
					var a topArgs
					if err = a.flagSet().Parse([]string{"--" + name, v}); err == nil && a.check() != "" {
						err = errors.New(a.check())
					}
				default:
					t.Errorf("%s --%s: no check of its values", c.name, name)
				}
				if err != nil {
					t.Errorf("%s --%s %s is offered but refused: %v", c.name, name, v, err)
				}
			}
		}
	}

	// Every command of the table is one that sluice runs and documents.
	for _, c := range table {
		asks := [][]string{{c.name, "-h"}, {"help", c.name}}
		if c.name == "help" {
			asks = [][]string{{"help"}, {"help", "help"}}
		}
		for _, args := range asks {
			var out, errb bytes.Buffer
			if code := Run(context.Background(), args, &out, &errb); code != 0 || out.Len() == 0 {
				t.Errorf("sluice %s: exit %d, stderr %q; want its usage", strings.Join(args, " "), code, errb.String())
			}
		}
		for _, sub := range c.subs {
			var out, errb bytes.Buffer
			if code := Run(context.Background(), []string{"help", c.name, sub}, &out, &errb); code != 0 || out.Len() == 0 {
				t.Errorf("sluice help %s %s: exit %d, stderr %q; want its usage", c.name, sub, code, errb.String())
			}
		}
	}
}

func TestCompletionCommand(t *testing.T) {
	for _, tc := range []struct {
		args         []string
		code         int
		stdout, errs string // what each starts with, or contains for errs
	}{
		{[]string{"completion", "bash"}, 0, "# bash completion for sluice", ""},
		{[]string{"completion", "zsh"}, 0, "#compdef sluice", ""},
		{[]string{"completion", "fish"}, 0, "# fish completion for sluice", ""},
		{[]string{"completion", "-h"}, 0, "Usage: sluice completion bash|zsh|fish", ""},
		{[]string{"help", "completion"}, 0, "Usage: sluice completion bash|zsh|fish", ""},
		{[]string{"completion", "__complete", "ver"}, 0, "version\tprint the version\n", ""},
		{[]string{"completion"}, 2, "", "want one SHELL"},
		{[]string{"completion", "bash", "zsh"}, 2, "", "want one SHELL"},
		{[]string{"completion", "tcsh"}, 2, "", `unknown shell "tcsh"`},
	} {
		var out, errb bytes.Buffer
		code := Run(context.Background(), tc.args, &out, &errb)
		if code != tc.code || !strings.HasPrefix(out.String(), tc.stdout) || (tc.errs == "") != (errb.Len() == 0) || !strings.Contains(errb.String(), tc.errs) {
			t.Errorf("%q: exit %d, stdout %.60q, stderr %q; want exit %d, stdout starting %q, stderr with %q", tc.args, code, out.String(), errb.String(), tc.code, tc.stdout, tc.errs)
		}
	}
}

// FuzzComplete feeds arbitrary command lines to complete: it never panics,
// every candidate extends the word under the cursor, and carries the part
// of it before a flag's "=".
func FuzzComplete(f *testing.F) {
	f.Add("serve\x00--log-level\x00=\x00w")
	f.Add("client\x00set-limit\x00--rule\x00r\x00--")
	f.Add("descriptor\x00show\x00--\x00--")
	f.Add("serve\x00--config=ex")
	f.Add("")
	f.Fuzz(func(t *testing.T, line string) {
		words := strings.Split(line, "\x00")
		cands, _, prefix := complete(words)
		cur := words[len(words)-1]
		for _, c := range cands {
			if !strings.HasPrefix(c.word, cur) {
				t.Errorf("complete(%q) offers %q, which does not extend %q", words, c.word, cur)
			}
			if !strings.HasPrefix(c.word, prefix) {
				t.Errorf("complete(%q) offers %q without its prefix %q", words, c.word, prefix)
			}
		}
	})
}
