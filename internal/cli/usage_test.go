package cli_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/cli"
)

// Every command answers a request for help the same way (its usage on
// stdout, exit 0) and bad usage the same way: exit 2, nothing on stdout,
// and on stderr one line that names the command and the problem, then a
// pointer to the usage.
func TestUsage(t *testing.T) {
	// The admin commands' checks come before any reading of the token:
	// none is set.
	t.Setenv("SLUICE_ADMIN_TOKEN_FILE", "")
	t.Setenv("SLUICE_ADMIN_URL", "")
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("a-token-of-thirty-two-characters"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		// help is the start of the usage on stdout, for a request for
		// help; problem is the first line on stderr, for bad usage, and
		// usage the command whose -h it points to.
		help, problem, usage string
	}{
		{args: []string{"help"}, help: "Sluice is a rate limiter for APIs"},
		{args: []string{"-h"}, help: "Sluice is a rate limiter for APIs"},
		{args: []string{"--help"}, help: "Sluice is a rate limiter for APIs"},
		{args: []string{"help", "help"}, help: "Sluice is a rate limiter for APIs"},
		{args: []string{"help", "-h"}, help: "Sluice is a rate limiter for APIs"},
		{args: []string{"help", "--help"}, help: "Sluice is a rate limiter for APIs"},
		{args: []string{"serve", "-h"}, help: "Usage: sluice serve --config FILE"},
		{args: []string{"serve", "--help"}, help: "Usage: sluice serve --config FILE"},
		{args: []string{"serve", "--config", "x.yaml", "-h"}, help: "Usage: sluice serve --config FILE"},
		{args: []string{"help", "serve"}, help: "Usage: sluice serve --config FILE"},
		{args: []string{"check-config", "-h"}, help: "Usage: sluice check-config FILE"},
		{args: []string{"help", "check-config"}, help: "Usage: sluice check-config FILE"},
		{args: []string{"version", "-h"}, help: "Usage: sluice version"},
		{args: []string{"help", "version"}, help: "Usage: sluice version"},
		{args: []string{"client", "-h"}, help: "Usage: sluice client COMMAND"},
		{args: []string{"client", "--help"}, help: "Usage: sluice client COMMAND"},
		{args: []string{"client", "help"}, help: "Usage: sluice client COMMAND"},
		{args: []string{"help", "client"}, help: "Usage: sluice client COMMAND"},
		{args: []string{"help", "client", "set-limit"}, help: "Usage: sluice client COMMAND"},
		{args: []string{"client", "set-limit", "-h"}, help: "Usage: sluice client COMMAND"},
		{args: []string{"client", "set-limit", "k", "--limit", "0", "--help"}, help: "Usage: sluice client COMMAND"},
		{args: []string{"key", "-h"}, help: "Usage: sluice key COMMAND"},
		{args: []string{"help", "key"}, help: "Usage: sluice key COMMAND"},
		{args: []string{"key", "show", "--help"}, help: "Usage: sluice key COMMAND"},
		{args: []string{"descriptor", "-h"}, help: "Usage: sluice descriptor COMMAND"},
		{args: []string{"help", "descriptor"}, help: "Usage: sluice descriptor COMMAND"},

		{args: []string{"nope"}, problem: `sluice: unknown command "nope"`, usage: "sluice"},
		{args: []string{"--nope"}, problem: `sluice: unknown command "--nope"`, usage: "sluice"},
		{args: []string{"help", "nope"}, problem: `sluice help: unknown command "nope"`, usage: "sluice"},
		{args: []string{"help", "serve", "extra"}, problem: "sluice help: want one COMMAND, got serve extra", usage: "sluice"},
		{args: []string{"serve"}, problem: "sluice serve: want --config FILE", usage: "sluice serve"},
		{args: []string{"serve", "--nope"}, problem: "sluice serve: flag provided but not defined: -nope", usage: "sluice serve"},
		{args: []string{"serve", "--config"}, problem: "sluice serve: flag needs an argument: -config", usage: "sluice serve"},
		{args: []string{"serve", "--config", "x", "extra"}, problem: `sluice serve: want --config FILE and no other arguments, got "extra"`, usage: "sluice serve"},
		{args: []string{"serve", "--config", "x", "--log-level", "loud"}, problem: `sluice serve: --log-level "loud": want debug, info, warn or error`, usage: "sluice serve"},
		{args: []string{"serve", "--config", "x", "--log-format", "xml"}, problem: `sluice serve: --log-format "xml": want text or json`, usage: "sluice serve"},
		{args: []string{"check-config"}, problem: "sluice check-config: want one FILE", usage: "sluice check-config"},
		{args: []string{"check-config", "a.yaml", "b.yaml"}, problem: "sluice check-config: want one FILE, got a.yaml b.yaml", usage: "sluice check-config"},
		{args: []string{"check-config", "--strict", "a.yaml"}, problem: "sluice check-config: flag provided but not defined: -strict", usage: "sluice check-config"},
		{args: []string{"version", "extra"}, problem: `sluice version: want no arguments, got "extra"`, usage: "sluice version"},

		{args: []string{"client"}, problem: "sluice client: want a command: list, show, set-tier, set-limit, set-anchor or remove", usage: "sluice client"},
		{args: []string{"key", "frob"}, problem: `sluice key: unknown command "frob": want show or reset`, usage: "sluice key"},
		{args: []string{"descriptor", "frob", "--token-file", tok}, problem: `sluice descriptor: unknown command "frob": want show, reset, set-limit, list or remove`, usage: "sluice descriptor"},
		{args: []string{"client", "list"}, problem: "sluice client list: want --token-file FILE (or SLUICE_ADMIN_TOKEN_FILE), the file holding the admin token", usage: "sluice client"},
		{args: []string{"client", "list", "extra", "--token-file", tok}, problem: `sluice client list: want no arguments, got "extra"`, usage: "sluice client"},
		{args: []string{"client", "show", "--token-file", tok}, problem: "sluice client show: want CLIENT", usage: "sluice client"},
		{args: []string{"client", "set-tier", "k", "--token-file", tok}, problem: "sluice client set-tier: want CLIENT TIER", usage: "sluice client"},
		{args: []string{"client", "set-tier", "k", "gold", "--until", "tomorrow", "--token-file", tok}, problem: `sluice client set-tier: --until "tomorrow": want an RFC 3339 time such as 2026-12-31T00:00:00Z`, usage: "sluice client"},
		{args: []string{"client", "set-limit", "k", "--rule", "api", "--limit", "0", "--period", "1m", "--token-file", tok}, problem: "sluice client set-limit: --limit 0: want a whole number of at least 1", usage: "sluice client"},
		{args: []string{"client", "set-limit", "k", "--rule", "api", "--limit", "-5", "--period", "1m", "--token-file", tok}, problem: "sluice client set-limit: --limit -5: want a whole number of at least 1", usage: "sluice client"},
		{args: []string{"client", "set-limit", "k", "--rule", "api", "--limit", "five", "--period", "1m", "--token-file", tok}, problem: `sluice client set-limit: invalid value "five" for flag -limit: parse error`, usage: "sluice client"},
		{args: []string{"client", "set-limit", "k", "--rule", "api", "--limit", "5", "--period", "1m", "--burst", "-1", "--token-file", tok}, problem: "sluice client set-limit: --burst -1: want a whole number of at least 1", usage: "sluice client"},
		{args: []string{"client", "set-limit", "k", "--rule", "api", "--period", "1m", "--token-file", tok}, problem: "sluice client set-limit: want CLIENT --rule RULE --limit N --period DURATION", usage: "sluice client"},
		{args: []string{"client", "set-tier", "k", "gold", "--limit", "5", "--token-file", tok}, problem: "sluice client set-tier: flag provided but not defined: -limit", usage: "sluice client"},
		{args: []string{"client", "list", "--admin", "ftp://x", "--token-file", tok}, problem: `sluice client list: --admin "ftp://x": want an http:// or https:// URL`, usage: "sluice client"},
		{args: []string{"key", "show", "--token-file", tok}, problem: "sluice key show: want VALUE... (or --rule for a rule keyed by global alone)", usage: "sluice key"},
		{args: []string{"key", "reset", "x", "--limit", "5", "--token-file", tok}, problem: "sluice key reset: flag provided but not defined: -limit", usage: "sluice key"},
		{args: []string{"descriptor", "show", "api", "--token-file", tok}, problem: "sluice descriptor show: want DOMAIN KEY=VALUE...", usage: "sluice descriptor"},
		{args: []string{"descriptor", "show", "api", "client", "--token-file", tok}, problem: `sluice descriptor show: entry "client": want KEY=VALUE`, usage: "sluice descriptor"},
		{args: []string{"descriptor", "set-limit", "api", "a=b", "--limit", "0", "--period", "1h", "--token-file", tok}, problem: "sluice descriptor set-limit: --limit 0: want a whole number of at least 1", usage: "sluice descriptor"},
	} {
		var out, errb bytes.Buffer
		c := cli.Run(context.Background(), tc.args, &out, &errb)
		if tc.help != "" {
			if c != 0 || !strings.HasPrefix(out.String(), tc.help) || errb.Len() != 0 {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 0 and a usage starting %q on stdout", tc.args, c, out.String(), errb.String(), tc.help)
			}
			continue
		}
		want := tc.problem + "\nRun '" + tc.usage + " -h' for usage.\n"
		if c != 2 || errb.String() != want || out.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and stderr %q", tc.args, c, out.String(), errb.String(), want)
		}
	}
	// Without a command, the usage is the answer, on stderr.
	var out, errb bytes.Buffer
	if c := cli.Run(context.Background(), nil, &out, &errb); c != 2 || out.Len() != 0 || !strings.HasPrefix(errb.String(), "Sluice is a rate limiter for APIs") {
		t.Errorf("no arguments: exit %d, stdout %q, stderr %q; want exit 2 and the usage on stderr", c, out.String(), errb.String())
	}
}

// The usage names every flag as it is written in the usage line and the
// README, with two dashes.
func TestUsageFlagsHaveTwoDashes(t *testing.T) {
	for _, tc := range []struct {
		cmd   []string
		flags []string
	}{
		{[]string{"serve"}, []string{"--config FILE", "--log-format", "--log-level"}},
		{[]string{"client"}, []string{"--admin URL", "--token-file FILE", "--json", "--until TIME", "--rule RULE"}},
		{[]string{"key"}, []string{"--admin URL", "--token-file FILE", "--rule RULE", "--client CLIENT"}},
		{[]string{"descriptor"}, []string{"--admin URL", "--limit N", "--period DURATION"}},
	} {
		var out bytes.Buffer
		cli.Run(context.Background(), append([]string{"help"}, tc.cmd...), &out, &out)
		for _, f := range tc.flags {
			if !strings.Contains(out.String(), f) {
				t.Errorf("%s's usage lacks %q:\n%s", tc.cmd[0], f, out.String())
			}
		}
		for _, line := range strings.Split(out.String(), "\n") {
			if l := strings.TrimSpace(line); strings.HasPrefix(l, "-") && !strings.HasPrefix(l, "--") {
				t.Errorf("%s's usage lists a flag with one dash: %q", tc.cmd[0], line)
			}
		}
	}
}

// serve and check-config say the same of a config file they cannot read.
func TestUnreadableConfigFile(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ path, want string }{
		{filepath.Join(dir, "nope.yaml"), filepath.Join(dir, "nope.yaml") + ": cannot read the config file: no such file or directory\n"},
		{dir, dir + ": cannot read the config file: is a directory\n"},
	} {
		for _, args := range [][]string{{"serve", "--config", tc.path}, {"check-config", tc.path}} {
			var out, errb bytes.Buffer
			if c := cli.Run(context.Background(), args, &out, &errb); c != 1 || errb.String() != tc.want || out.Len() != 0 {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 1 and %q", args, c, out.String(), errb.String(), tc.want)
			}
		}
	}
}
