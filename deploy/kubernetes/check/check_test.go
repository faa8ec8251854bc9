package check

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

// repo is the repository's root, from this package's directory.
const repo = "../../.."

// sluiceBin is the sluice binary built from the main module by TestMain.
var sluiceBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-check")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sluiceBin = filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-o", sluiceBin, "./cmd/sluice")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building sluice: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// helm returns the pinned helm that deploy/helm/install-helm.sh installs
// (building it the first time). It never skips: CI must run these tests.
func helm(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("bash", filepath.Join(repo, "deploy/helm/install-helm.sh")).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("installing helm: %v\n%s", err, stderr)
	}
	return strings.TrimSpace(string(out))
}

const chart = repo + "/deploy/helm/sluice"

// render runs helm template on the chart with the values files, as the
// release "sluice" in the namespace sluice, for the oldest Kubernetes the
// chart supports.
func render(t *testing.T, values ...string) ([]byte, error) {
	t.Helper()
	args := []string{"template", "sluice", chart, "--namespace", "sluice", "--kube-version", "1.30.0"}
	for _, v := range values {
		args = append(args, "-f", v)
	}
	var stderr strings.Builder
	cmd := exec.Command(helm(t), args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// readWay decodes the manifests, failing t on any decoding problem.
func readWay(t *testing.T, files ...string) way {
	t.Helper()
	var w way
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decodeAll(strings.TrimPrefix(f, repo+"/"), data)
		if err != nil {
			t.Fatal(err)
		}
		w.objects = append(w.objects, objs...)
	}
	return w
}

func glob(t *testing.T, pattern string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repo, pattern))
	if err != nil || len(files) == 0 {
		t.Fatalf("no files match %s: %v", pattern, err)
	}
	return files
}

func without(files []string, drop string) []string {
	return slices.DeleteFunc(slices.Clone(files), func(f string) bool { return strings.HasSuffix(f, drop) })
}

// TestManifests checks each way of deploy/kubernetes, as its docs apply
// it: the way's directory, with deploy/kubernetes/redis where it shares
// counts, and the Istio example with the rate-limit service it points at.
func TestManifests(t *testing.T) {
	redis := glob(t, "deploy/kubernetes/redis/*.yaml")
	rls := glob(t, "deploy/kubernetes/rls/*.yaml")
	cases := []struct {
		name  string
		files []string
	}{
		{"gateway", append(glob(t, "deploy/kubernetes/gateway/*.yaml"), redis...)},
		{"rls", append(slices.Clone(rls), redis...)},
		{"sidecar", glob(t, "deploy/kubernetes/sidecar/*.yaml")},
		// deploy/istio's ConfigMap replaces the rate-limit service's.
		{"istio", append(append(without(rls, "/configmap.yaml"), redis...), glob(t, "deploy/istio/*.yaml")...)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := readWay(t, tc.files...)
			for _, err := range w.check(context.Background(), sluiceBin, t.TempDir()) {
				t.Error(err)
			}
			for _, err := range w.checkIstio() {
				t.Error(err)
			}
			if tc.name == "istio" && len(all[*envoyFilter](w)) != 2 {
				t.Errorf("got %d EnvoyFilters, want 2", len(all[*envoyFilter](w)))
			}
		})
	}
	// The manifests run the image of the chart's appVersion.
	chartYAML, err := os.ReadFile(chart + "/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(chartYAML, &meta); err != nil || meta.AppVersion == "" {
		t.Fatalf("Chart.yaml: appVersion %q, %v", meta.AppVersion, err)
	}
	for _, f := range glob(t, "deploy/kubernetes/*/deployment.yaml") {
		for _, d := range all[*appsv1.Deployment](readWay(t, f)) {
			if c := container(&d.Spec.Template.Spec, sluiceContainer); c != nil && !strings.HasSuffix(c.Image, ":"+meta.AppVersion) {
				t.Errorf("%s: image %s, want the chart's appVersion %s", f, c.Image, meta.AppVersion)
			}
		}
	}

	// Every file of deploy/kubernetes and deploy/istio is in some way.
	var seen []string
	for _, tc := range cases {
		seen = append(seen, tc.files...)
	}
	for _, f := range append(glob(t, "deploy/kubernetes/*/*.yaml"), glob(t, "deploy/istio/*.yaml")...) {
		if !slices.Contains(seen, f) {
			t.Errorf("%s is checked by no case of TestManifests", f)
		}
	}
}

// TestChart renders the chart with each documented value set of its ci
// directory and checks the result as TestManifests does.
func TestChart(t *testing.T) {
	sets := glob(t, "deploy/helm/sluice/ci/*.yaml")
	modes := map[string]bool{}
	for _, values := range sets {
		t.Run(filepath.Base(values), func(t *testing.T) {
			// helm's own checks of the chart, warnings included.
			lint := exec.Command(helm(t), "lint", "--strict", chart, "-f", values, "--kube-version", "1.30.0")
			if out, err := lint.CombinedOutput(); err != nil {
				t.Errorf("helm lint: %v\n%s", err, out)
			}
			out, err := render(t, values)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := decodeAll("helm template -f "+filepath.Base(values), out)
			if err != nil {
				t.Fatal(err)
			}
			w := way{objects: objs}
			for _, err := range w.check(context.Background(), sluiceBin, t.TempDir()) {
				t.Error(err)
			}
			for _, cm := range all[*envoyFilter](w) {
				t.Errorf("the chart rendered EnvoyFilter %s", cm.Name)
			}
			for _, o := range objs {
				if c, ok := o.meta.Labels["app.kubernetes.io/component"]; ok {
					modes[c] = true
				}
			}
		})
	}
	for _, m := range []string{"gateway", "rls", "sidecar"} {
		if !modes[m] {
			t.Errorf("no value set of ci/ runs mode %s", m)
		}
	}
}

// TestChartRefuses: values that would deploy something broken fail to
// render, with a message that names the value.
func TestChartRefuses(t *testing.T) {
	cases := []struct {
		name, values, want string
	}{
		{"defaults", "", "config.upstream: the gateway needs the URL"},
		{"gateway without rules", "config: {upstream: http://a:1}\n", "config.rules: mode gateway needs at least one rule"},
		{"service without descriptors", "mode: rls\n", "descriptors: the rate-limit service needs"},
		{"unknown mode", "mode: proxy\nconfig: {upstream: http://a:1, rules: [{name: r, key: [ip], limit: 1, period: 1s}]}\n", `mode: "proxy" is not one of gateway, rls, sidecar`},
		{"autoscaled memory store", "mode: gateway\nautoscaling: {enabled: true}\nconfig: {upstream: http://a:1, rules: [{name: r, key: [ip], limit: 1, period: 1s}]}\n", "autoscaling: not with the memory store"},
		{"sidecar without application", "mode: sidecar\nconfig: {rules: [{name: r, key: [ip], limit: 1, period: 1s}]}\n", "sidecar.app.image"},
		{"file named as the config", "files: {sluice.yaml: x}\nconfig: {upstream: http://a:1, rules: [{name: r, key: [ip], limit: 1, period: 1s}]}\n", `files: "sluice.yaml" is reserved`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(f, []byte(tc.values), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := render(t, f)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestChartConfigChecked: a value set whose rules are wrong renders (helm
// knows nothing of Sluice's config) but fails the check, with sluice
// check-config's message.
func TestChartConfigChecked(t *testing.T) {
	f := filepath.Join(t.TempDir(), "values.yaml")
	values := "mode: gateway\nreplicas: 1\nconfig: {upstream: http://a:1, rules: [{name: r, key: [ip], limit: 1, period: 1 second}]}\n"
	if err := os.WriteFile(f, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := render(t, f)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeAll("helm template", out)
	if err != nil {
		t.Fatal(err)
	}
	errs := way{objects: objs}.check(context.Background(), sluiceBin, t.TempDir())
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "sluice check-config") || !strings.Contains(errs[0].Error(), "period") {
		t.Errorf("got %v, want one error from sluice check-config about the period", errs)
	}
}
