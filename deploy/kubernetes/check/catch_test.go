package check

import (
	"context"
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestDecodeStrict: what a lenient decoder would let through is refused.
func TestDecodeStrict(t *testing.T) {
	cases := []struct {
		name, doc, want string
	}{
		{"unknown field", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\nspec: {replica: 2}\n", `unknown field "replica"`},
		{"duplicate field", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: a}\ndata: {k: b}\n", `key "data" already set in map`},
		{"wrong type", "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {ports: [{port: eighty}]}\n", `cannot unmarshal`},
		{"bad quantity", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\nspec: {template: {spec: {containers: [{name: c, resources: {requests: {cpu: lots}}}]}}}\n", `quantities must match`},
		{"unknown kind", "apiVersion: v1\nkind: Secret\nmetadata: {name: a}\n", `no Go type for "v1 Secret"`},
		{"old API version", "apiVersion: policy/v1beta1\nkind: PodDisruptionBudget\nmetadata: {name: a}\n", `no Go type`},
		{"no name", "apiVersion: v1\nkind: ConfigMap\ndata: {k: a}\n", `without metadata.name`},
		{"ServiceMonitor field", "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: a}\nspec: {selector: {}, endpoints: [{port: admin, scrapeEvery: 1s}]}\n", `unknown field`},
		{"EnvoyFilter field", envoyFilterDoc(`"@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
            domian: ingress`), `unknown field "domian"`},
		{"EnvoyFilter rule", envoyFilterDoc(`"@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
            domain: ""`), `Domain: value length must be at least 1`},
		{"EnvoyFilter type", envoyFilterDoc(`"@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitt
            domain: ingress`), `RateLimitt`},
		{"EnvoyFilter applyTo", strings.Replace(envoyFilterDoc(`"@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
            domain: ingress`), "HTTP_FILTER", "HTTP_FILTR", 1), `HTTP_FILTR`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeAll("doc", []byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
	// The same EnvoyFilter, put right, decodes.
	if _, err := decodeAll("doc", []byte(envoyFilterDoc(`"@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
            domain: ingress`))); err != nil {
		t.Errorf("a valid EnvoyFilter: %v", err)
	}
}

func envoyFilterDoc(typedConfig string) string {
	return `apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: a, namespace: istio-system}
spec:
  configPatches:
    - applyTo: HTTP_FILTER
      match: {context: GATEWAY}
      patch:
        operation: INSERT_BEFORE
        value:
          name: envoy.filters.http.ratelimit
          typed_config:
            ` + typedConfig + `
            rate_limit_service:
              grpc_service: {envoy_grpc: {cluster_name: c}}
              transport_api_version: V3
`
}

// TestWayCatches: each check of a way finds the mistake it is there for,
// made in the gateway's manifests.
func TestWayCatches(t *testing.T) {
	deployment := func(w way) *appsv1.Deployment {
		for _, d := range all[*appsv1.Deployment](w) {
			if container(&d.Spec.Template.Spec, sluiceContainer) != nil {
				return d
			}
		}
		t.Fatal("no Sluice Deployment")
		return nil
	}
	sluice := func(w way) *corev1.Container {
		return container(&deployment(w).Spec.Template.Spec, sluiceContainer)
	}
	configMap := func(w way) *corev1.ConfigMap { return all[*corev1.ConfigMap](w)[0] }
	cases := []struct {
		name   string
		change func(w way)
		want   string
	}{
		{"root", func(w way) { *deployment(w).Spec.Template.Spec.SecurityContext.RunAsNonRoot = false }, "runAsNonRoot is not true"},
		{"no seccomp", func(w way) { deployment(w).Spec.Template.Spec.SecurityContext.SeccompProfile = nil }, "seccompProfile is not RuntimeDefault"},
		{"writable root", func(w way) { *sluice(w).SecurityContext.ReadOnlyRootFilesystem = false }, "readOnlyRootFilesystem is not true"},
		{"capabilities", func(w way) { sluice(w).SecurityContext.Capabilities.Drop = nil }, "do not drop ALL"},
		{"no requests", func(w way) { sluice(w).Resources.Requests = nil }, "no CPU or memory request"},
		{"readiness path", func(w way) { sluice(w).ReadinessProbe.HTTPGet.Path = "/healthz" }, "readiness probe on /healthz, want /readyz"},
		{"no liveness", func(w way) { sluice(w).LivenessProbe = nil }, "no HTTP liveness probe"},
		{"subPath", func(w way) { sluice(w).VolumeMounts[0].SubPath = "sluice.yaml" }, "subPath"},
		{"no PDB", func(w way) {
			deployment(w).Spec.Template.Labels["app.kubernetes.io/instance"] = "x"
			deployment(w).Spec.Selector.MatchLabels["app.kubernetes.io/instance"] = "x"
		}, "no PodDisruptionBudget"},
		{"service port", func(w way) { sluice(w).Ports[0].Name = "web" }, "is no port of the pod"},
		{"admin on loopback", func(w way) {
			configMap(w).Data["sluice.yaml"] = strings.Replace(configMap(w).Data["sluice.yaml"], `admin: ":9090"`, `admin: 127.0.0.1:9090`, 1)
		}, "server.admin: 127.0.0.1:9090 is on loopback"},
		{"listen port", func(w way) {
			configMap(w).Data["sluice.yaml"] = strings.Replace(configMap(w).Data["sluice.yaml"], `listen: ":8080"`, `listen: ":8000"`, 1)
		}, `server.listen: port 8000, but the container's port http is "8080"`},
		{"bad config", func(w way) {
			configMap(w).Data["sluice.yaml"] = strings.Replace(configMap(w).Data["sluice.yaml"], "algorithm: gcra", "algorithm: gcrb", 1)
		}, "sluice check-config"},
		{"config elsewhere", func(w way) { sluice(w).Args[2] = "/etc/sluice/config.yaml" }, "no such file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := readWay(t, append(glob(t, "deploy/kubernetes/gateway/*.yaml"), glob(t, "deploy/kubernetes/redis/*.yaml")...)...)
			tc.change(w)
			errs := w.check(context.Background(), sluiceBin, t.TempDir())
			for _, err := range errs {
				if strings.Contains(err.Error(), tc.want) {
					return
				}
			}
			t.Errorf("got %v, want an error with %q", errs, tc.want)
		})
	}
}

// TestIstioCatches: the Istio example's filter must call the rate-limit
// service's gRPC port, for a domain it configures.
func TestIstioCatches(t *testing.T) {
	files := append(without(glob(t, "deploy/kubernetes/rls/*.yaml"), "/configmap.yaml"), glob(t, "deploy/istio/*.yaml")...)
	cases := []struct {
		name, old, new, want string
	}{
		{"port", "outbound|8081||", "outbound|8080||", "is not Service sluice-rls's grpc port"},
		{"service", "outbound|8081||sluice-rls.", "outbound|8081||ratelimit.", "no Service ratelimit"},
		{"domain", "domain: ingress\n            #", "domain: edge\n            #", `domain "edge"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := readWay(t, files...)
			raw, err := os.ReadFile(repo + "/deploy/istio/envoyfilter.yaml")
			if err != nil {
				t.Fatal(err)
			}
			data := string(raw)
			if !strings.Contains(data, tc.old) {
				t.Fatalf("envoyfilter.yaml has no %q", tc.old)
			}
			objs, err := decodeAll("changed", []byte(strings.Replace(data, tc.old, tc.new, 1)))
			if err != nil {
				t.Fatal(err)
			}
			var w2 way
			for _, o := range w.objects {
				if _, ok := o.obj.(*envoyFilter); !ok {
					w2.objects = append(w2.objects, o)
				}
			}
			w2.objects = append(w2.objects, objs...)
			errs := w2.checkIstio()
			for _, err := range errs {
				if strings.Contains(err.Error(), tc.want) {
					return
				}
			}
			t.Errorf("got %v, want an error with %q", errs, tc.want)
		})
	}
}
