package main_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLicenseAndNotice checks that LICENSE is the Apache License 2.0 word
// for word, and that NOTICE names every module compiled into the sluice
// command and carries the NOTICE file of each that has one, as the
// Apache License asks of a binary distribution.
func TestLicenseAndNotice(t *testing.T) {
	license, err := os.ReadFile("../../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	// The SHA-256 of https://www.apache.org/licenses/LICENSE-2.0.txt.
	const apache2 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"
	if sum := sha256.Sum256(license); hex.EncodeToString(sum[:]) != apache2 {
		t.Errorf("LICENSE is not the Apache License 2.0 as published (SHA-256 %x)", sum)
	}
	b, err := os.ReadFile("../../NOTICE")
	if err != nil {
		t.Fatal(err)
	}
	notice := string(b)
	out, err := exec.Command("go", "list", "-deps", "-f", "{{with .Module}}{{if not .Main}}{{.Path}}\t{{.Dir}}{{end}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, dir, _ := strings.Cut(line, "\t")
		if path == "" || seen[path] {
			continue
		}
		seen[path] = true
		if !strings.Contains(notice, "  "+path+" ") {
			t.Errorf("NOTICE does not list %s, which the sluice command compiles in", path)
		}
		if dir == "" {
			t.Errorf("%s: go list gives no directory to read its NOTICE from", path)
			continue
		}
		files, _ := filepath.Glob(filepath.Join(dir, "NOTICE*"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(notice, strings.TrimSpace(string(b))) {
				t.Errorf("NOTICE does not carry %s's %s", path, filepath.Base(f))
			}
		}
	}
	if len(seen) == 0 {
		t.Fatal("go list found no modules")
	}
}
