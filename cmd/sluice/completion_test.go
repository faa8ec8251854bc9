package main_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// zshCapture types each of its arguments into an interactive zsh on a
// pseudo-terminal and presses Tab, printing every candidate the completion
// system is given as <hits>A|B</hits> (compadd is wrapped to show them),
// then <done>N after the Nth.
const zshCapture = `zmodload zsh/zpty
zpty z zsh -f -i
zpty -w z "PROMPT='' RPROMPT=''"
zpty -w z "autoload -Uz compinit && compinit -u -D"
zpty -w z "source <(sluice completion zsh)"
zpty -w z "bindkey '^I' complete-word"
zpty -w z "zstyle ':completion:*' insert-tab false"
zpty -w z 'compadd () { local -a __hits; builtin compadd -O __hits "$@"; [[ -n $__hits ]] && print -r -- "<${:-hits}>${(j:|:)__hits}</hits>"; builtin compadd "$@" }'
integer i=0
for typed in "$@"; do
  (( i++ ))
  zpty -w z "$typed"$'\t'
  zpty -w z $'\C-u''print -r -- "<${:-done}>'$i'"'
  while zpty -r z line; do print -r -- $line; [[ $line == *"<done>$i"* ]] && break; done
done
zpty -d z
`

// TestCompletionInShells loads `sluice completion SHELL` into each shell
// on the machine and asks it to complete partial command lines: bash
// always; zsh and fish where installed.
func TestCompletionInShells(t *testing.T) {
	bin := buildSluice(t)
	// The scripts run the sluice being completed: the one on PATH here.
	dir := t.TempDir()
	for _, f := range []string{"quick.yaml", "other.yaml"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := append(os.Environ(), "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))

	cases := []struct {
		line string   // typed after the prompt; the cursor at its end
		want []string // as bash completes the word under the cursor
		// as fish completes it, when not want: it completes --flag=value
		// whole, where bash splits it at the "="; so does zsh, but for
		// file names, which it completes after the "="
		whole []string
		zsh   []string
	}{
		{line: "sluice se", want: []string{"serve"}},
		{line: "sluice c", want: []string{"check-config", "client", "completion"}},
		{line: "sluice serve --log-", want: []string{"--log-format", "--log-level"}},
		{line: "sluice serve --log-format ", want: []string{"json", "text"}},
		{line: "sluice serve --log-level=w", want: []string{"warn"}, whole: []string{"--log-level=warn"}, zsh: []string{"--log-level=warn"}},
		{line: "sluice serve --config q", want: []string{"quick.yaml"}},
		{line: "sluice serve --config=q", want: []string{"quick.yaml"}, whole: []string{"--config=quick.yaml"}},
		{line: "sluice check-config ", want: []string{"other.yaml", "quick.yaml"}},
		{line: "sluice client set-", want: []string{"set-anchor", "set-limit", "set-tier"}},
		{line: "sluice key show --", want: []string{"--admin", "--client", "--help", "--json", "--rule", "--token-file"}},
		{line: "sluice completion f", want: []string{"fish"}},
		{line: "sluice version ", want: nil},
	}
	run := func(t *testing.T, name string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %q: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
	check := func(t *testing.T, line string, got, want []string) {
		t.Helper()
		got = slices.Compact(slices.Sorted(slices.Values(got)))
		if !slices.Equal(got, want) {
			t.Errorf("%q completes to %q, want %q", line, got, want)
		}
	}

	t.Run("bash", func(t *testing.T) {
		if _, err := exec.LookPath("bash"); err != nil {
			t.Fatalf("bash: %v", err)
		}
		// Call the completion function as bash's readline does, with
		// COMP_WORDS split as bash splits them (also at "=").
		script := `source <(sluice completion bash)
[[ $(complete -p sluice) == "complete -F _sluice sluice" ]] || { echo "not registered: $(complete -p sluice)"; exit 1; }
COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMPREPLY=()
_sluice
printf '%s\n' "${COMPREPLY[@]}"`
		for _, tc := range cases {
			words := strings.Fields(strings.ReplaceAll(tc.line, "=", " = "))
			if strings.HasSuffix(tc.line, " ") {
				words = append(words, "")
			}
			out := run(t, "bash", append([]string{"--norc", "--noprofile", "-c", script, "bash"}, words...)...)
			check(t, tc.line, strings.Fields(out), tc.want)
		}
	})

	t.Run("zsh", func(t *testing.T) {
		if _, err := exec.LookPath("zsh"); err != nil {
			t.Skip("zsh is not installed")
		}
		args := []string{"-f", "-c", zshCapture, "zsh"}
		for _, tc := range cases {
			args = append(args, tc.line)
		}
		out := run(t, "zsh", args...)
		hits := regexp.MustCompile(`<hits>([^<]*)</hits>`)
		for i, tc := range cases {
			// The output of the ith line ends with <done>i.
			part, rest, ok := strings.Cut(out, fmt.Sprintf("<done>%d", i+1))
			if !ok {
				t.Fatalf("no <done>%d in zsh's output:\n%s", i+1, out)
			}
			out = rest
			var got []string
			for _, m := range hits.FindAllStringSubmatch(part, -1) {
				got = append(got, strings.Split(m[1], "|")...)
			}
			want := tc.want
			if tc.zsh != nil {
				want = tc.zsh
			}
			check(t, tc.line, got, want)
		}
	})

	t.Run("fish", func(t *testing.T) {
		if _, err := exec.LookPath("fish"); err != nil {
			t.Skip("fish is not installed")
		}
		for _, tc := range cases {
			out := run(t, "fish", "--no-config", "-c", "sluice completion fish | source; complete -C $argv[1]", tc.line)
			var got []string
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				if w, _, _ := strings.Cut(l, "\t"); w != "" {
					got = append(got, w)
				}
			}
			want := tc.want
			if tc.whole != nil {
				want = tc.whole
			}
			check(t, tc.line, got, want)
		}
		// fish shows the descriptions.
		if out := run(t, "fish", "--no-config", "-c", "sluice completion fish | source; complete -C 'sluice se'"); !strings.Contains(out, "serve\trun whatever the config file enables") {
			t.Errorf("fish shows no description of serve: %q", out)
		}
	})
}
