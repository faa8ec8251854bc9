package check

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	istionet "istio.io/api/networking/v1alpha3"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// way is the objects of one way of running Sluice (one directory of
// manifests, or one rendering of the chart), as they would be applied to
// one namespace.
type way struct {
	objects []object
}

// all returns the objects of type T.
func all[T any](w way) []T {
	var out []T
	for _, o := range w.objects {
		if v, ok := o.obj.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// sluiceContainer is the name of Sluice's container in every pod.
const sluiceContainer = "sluice"

// check checks that the objects fit together and that each Sluice pod's
// config passes `sluice check-config` (the binary at sluiceBin), with its
// ConfigMap volumes laid out under root as the kubelet would write them.
// It reports every problem found.
func (w way) check(ctx context.Context, sluiceBin, root string) []error {
	var errs []error
	deployments := all[*appsv1.Deployment](w)
	if len(deployments) == 0 {
		errs = append(errs, errors.New("no Deployment"))
	}
	sluicePods := 0
	for _, d := range deployments {
		pod := &d.Spec.Template
		fail := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("Deployment %s: %s", d.Name, fmt.Sprintf(format, args...)))
		}
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(pod.Labels)) {
			fail("its selector %v does not select its own pods (%v)", d.Spec.Selector, pod.Labels)
			continue
		}
		for _, e := range checkRestricted(&pod.Spec) {
			fail("%v", e)
		}
		if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
			fail("automountServiceAccountToken is not false")
		}
		svc := w.serviceFor(pod)
		if svc == nil {
			fail("no Service selects its pods")
		}
		for _, e := range w.checkScaling(d) {
			fail("%v", e)
		}
		c := container(&pod.Spec, sluiceContainer)
		if c == nil {
			continue // Redis, or another component
		}
		sluicePods++
		if !w.hasPDB(pod.Labels) {
			fail("no PodDisruptionBudget selects its pods")
		}
		for _, e := range checkSluiceContainer(&pod.Spec, c) {
			fail("container %s: %v", c.Name, e)
		}
		if svc != nil {
			for _, e := range checkServicePorts(svc, &pod.Spec) {
				fail("Service %s: %v", svc.Name, e)
			}
			if !w.scraped(pod, svc) {
				fail("neither prometheus.io annotations on its pods nor a ServiceMonitor of Service %s", svc.Name)
			}
		}
		dir := filepath.Join(root, d.Name)
		if err := w.mountConfigMaps(dir, &pod.Spec, c); err != nil {
			fail("%v", err)
			continue
		}
		for _, e := range checkConfig(ctx, sluiceBin, dir, c) {
			fail("container %s: %v", c.Name, e)
		}
	}
	if sluicePods == 0 {
		errs = append(errs, fmt.Errorf("no Deployment with a container named %s", sluiceContainer))
	}
	for _, sm := range all[*monitoringv1.ServiceMonitor](w) {
		if err := w.checkServiceMonitor(sm); err != nil {
			errs = append(errs, fmt.Errorf("ServiceMonitor %s: %w", sm.Name, err))
		}
	}
	return errs
}

func container(spec *corev1.PodSpec, name string) *corev1.Container {
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i]
		}
	}
	return nil
}

// checkRestricted checks the pod against the Pod Security Standards'
// restricted profile, as far as these pods use its fields: non-root,
// RuntimeDefault seccomp, no privilege escalation, every capability
// dropped, plus a read-only root filesystem and resource requests.
func checkRestricted(spec *corev1.PodSpec) []error {
	var errs []error
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		errs = append(errs, errors.New("pod securityContext.runAsNonRoot is not true"))
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		errs = append(errs, errors.New("pod securityContext.seccompProfile is not RuntimeDefault"))
	}
	if psc != nil && psc.RunAsUser != nil && *psc.RunAsUser == 0 {
		errs = append(errs, errors.New("pod securityContext.runAsUser is 0"))
	}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		sc := c.SecurityContext
		bad := func(what string) { errs = append(errs, fmt.Errorf("container %s: %s", c.Name, what)) }
		switch {
		case sc == nil:
			bad("no securityContext")
			continue
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			bad("allowPrivilegeEscalation is not false")
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			bad("readOnlyRootFilesystem is not true")
		case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0:
			bad("capabilities do not drop ALL, or add some")
		case sc.Privileged != nil && *sc.Privileged:
			bad("privileged")
		case sc.RunAsNonRoot != nil && !*sc.RunAsNonRoot:
			bad("runAsNonRoot is false")
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
			bad("no CPU or memory request")
		}
	}
	return errs
}

// checkSluiceContainer checks the probes, the ports and the config mount.
func checkSluiceContainer(spec *corev1.PodSpec, c *corev1.Container) []error {
	var errs []error
	port := func(name string) int32 {
		for _, p := range c.Ports {
			if p.Name == name {
				return p.ContainerPort
			}
		}
		return 0
	}
	if port("admin") == 0 {
		errs = append(errs, errors.New("no port named admin"))
	}
	probe := func(what string, p *corev1.Probe, path string) {
		switch {
		case p == nil || p.HTTPGet == nil:
			errs = append(errs, fmt.Errorf("no HTTP %s probe", what))
		case p.HTTPGet.Path != path:
			errs = append(errs, fmt.Errorf("%s probe on %s, want %s", what, p.HTTPGet.Path, path))
		case p.HTTPGet.Port.String() != "admin" && p.HTTPGet.Port.IntValue() != int(port("admin")):
			errs = append(errs, fmt.Errorf("%s probe on port %s, want the admin port", what, p.HTTPGet.Port.String()))
		}
	}
	probe("readiness", c.ReadinessProbe, "/readyz")
	probe("liveness", c.LivenessProbe, "/healthz")
	if configArg(c) == "" {
		errs = append(errs, fmt.Errorf("args %q do not name an absolute --config FILE", c.Args))
	}
	for _, m := range c.VolumeMounts {
		if m.SubPath != "" || m.SubPathExpr != "" {
			errs = append(errs, fmt.Errorf("volume %s mounted with a subPath: the kubelet never updates those, so a changed config would not reload", m.Name))
		}
	}
	if c.Resources.Limits.Memory().IsZero() {
		errs = append(errs, errors.New("no memory limit"))
	}
	if g := spec.TerminationGracePeriodSeconds; g != nil && c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		if c.Lifecycle.PreStop.Sleep.Seconds+10 > *g {
			errs = append(errs, fmt.Errorf("preStop sleeps %ds of a grace period of %ds: no time left to drain", c.Lifecycle.PreStop.Sleep.Seconds, *g))
		}
	}
	return errs
}

// configArg returns the FILE of --config FILE in the container's args, if
// it is absolute.
func configArg(c *corev1.Container) string {
	args := append(slices.Clone(c.Command), c.Args...)
	for i, a := range args {
		if a == "--config" && i+1 < len(args) && path.IsAbs(args[i+1]) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--config="); ok && path.IsAbs(v) {
			return v
		}
	}
	return ""
}

func (w way) hasPDB(podLabels map[string]string) bool {
	for _, p := range all[*policyv1.PodDisruptionBudget](w) {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err == nil && !sel.Empty() && sel.Matches(labels.Set(podLabels)) {
			return true
		}
	}
	return false
}

func (w way) serviceFor(pod *corev1.PodTemplateSpec) *corev1.Service {
	for _, s := range all[*corev1.Service](w) {
		if len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(pod.Labels)) {
			return s
		}
	}
	return nil
}

// checkServicePorts checks that each of the Service's target ports names
// a port of the pod.
func checkServicePorts(s *corev1.Service, spec *corev1.PodSpec) []error {
	var errs []error
	for _, sp := range s.Spec.Ports {
		found := false
		for _, c := range spec.Containers {
			for _, cp := range c.Ports {
				if cp.Name == sp.TargetPort.String() || int(cp.ContainerPort) == sp.TargetPort.IntValue() {
					found = true
				}
			}
		}
		if !found {
			errs = append(errs, fmt.Errorf("port %s: target port %s is no port of the pod", sp.Name, sp.TargetPort.String()))
		}
	}
	return errs
}

// scraped reports whether Prometheus finds the pod: by the prometheus.io
// annotations (naming the admin port), or by a ServiceMonitor of svc.
func (w way) scraped(pod *corev1.PodTemplateSpec, svc *corev1.Service) bool {
	if pod.Annotations["prometheus.io/scrape"] == "true" {
		c := container(&pod.Spec, sluiceContainer)
		for _, p := range c.Ports {
			if p.Name == "admin" && strconv.Itoa(int(p.ContainerPort)) == pod.Annotations["prometheus.io/port"] {
				return true
			}
		}
		return false
	}
	for _, sm := range all[*monitoringv1.ServiceMonitor](w) {
		sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		if err == nil && sel.Matches(labels.Set(svc.Labels)) {
			return true
		}
	}
	return false
}

// checkServiceMonitor checks that the ServiceMonitor selects a Service of
// the way, on a port of that Service, at /metrics.
func (w way) checkServiceMonitor(sm *monitoringv1.ServiceMonitor) error {
	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil || sel.Empty() {
		return fmt.Errorf("selector %v: %v", sm.Spec.Selector, err)
	}
	if len(sm.Spec.Endpoints) == 0 {
		return errors.New("no endpoints")
	}
	for _, s := range all[*corev1.Service](w) {
		if !sel.Matches(labels.Set(s.Labels)) {
			continue
		}
		for _, e := range sm.Spec.Endpoints {
			if e.Path != "" && e.Path != "/metrics" {
				return fmt.Errorf("endpoint path %s, want /metrics", e.Path)
			}
			if !slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == e.Port }) {
				return fmt.Errorf("endpoint port %q is no port of Service %s", e.Port, s.Name)
			}
		}
		return nil
	}
	return errors.New("selects no Service")
}

// checkScaling checks an autoscaler of the Deployment, if any: it targets
// the Deployment, which then leaves its replicas to it.
func (w way) checkScaling(d *appsv1.Deployment) []error {
	var errs []error
	for _, h := range all[*autoscalingv2.HorizontalPodAutoscaler](w) {
		ref := h.Spec.ScaleTargetRef
		if ref.Kind != "Deployment" || ref.Name != d.Name {
			continue
		}
		if ref.APIVersion != "apps/v1" {
			errs = append(errs, fmt.Errorf("HorizontalPodAutoscaler %s: scaleTargetRef.apiVersion %s", h.Name, ref.APIVersion))
		}
		if d.Spec.Replicas != nil {
			errs = append(errs, fmt.Errorf("replicas set beside HorizontalPodAutoscaler %s, which would fight over them", h.Name))
		}
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 {
			errs = append(errs, fmt.Errorf("HorizontalPodAutoscaler %s: minReplicas below 2", h.Name))
		}
	}
	return errs
}

// mountConfigMaps writes the ConfigMap volumes that c mounts under dir,
// each at its mountPath, as the kubelet's atomic writer lays them out: the
// files in a timestamped directory, ..data a link to it, and one link per
// top-level name into ..data (a subdirectory of the items included).
func (w way) mountConfigMaps(dir string, spec *corev1.PodSpec, c *corev1.Container) error {
	maps := map[string]*corev1.ConfigMap{}
	for _, cm := range all[*corev1.ConfigMap](w) {
		maps[cm.Name] = cm
	}
	for _, m := range c.VolumeMounts {
		i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 {
			return fmt.Errorf("volumeMount %s: no such volume", m.Name)
		}
		src := spec.Volumes[i].ConfigMap
		if src == nil {
			continue
		}
		cm := maps[src.Name]
		if cm == nil {
			return fmt.Errorf("volume %s: no ConfigMap %s", m.Name, src.Name)
		}
		files := map[string]string{} // path in the volume -> content
		if len(src.Items) == 0 {
			for k, v := range cm.Data {
				files[k] = v
			}
		}
		for _, it := range src.Items {
			v, ok := cm.Data[it.Key]
			if !ok {
				return fmt.Errorf("volume %s: ConfigMap %s has no key %s", m.Name, cm.Name, it.Key)
			}
			if !filepath.IsLocal(it.Path) {
				return fmt.Errorf("volume %s: item path %s leaves the volume", m.Name, it.Path)
			}
			files[it.Path] = v
		}
		mnt := filepath.Join(dir, filepath.FromSlash(m.MountPath))
		gen := "..2026_01_01_00_00_00.000000001"
		top := map[string]bool{}
		for p, v := range files {
			f := filepath.Join(mnt, gen, filepath.FromSlash(p))
			if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(f, []byte(v), 0o644); err != nil {
				return err
			}
			top[strings.SplitN(p, "/", 2)[0]] = true
		}
		if err := os.Symlink(gen, filepath.Join(mnt, "..data")); err != nil {
			return err
		}
		for name := range top {
			if err := os.Symlink(filepath.Join("..data", name), filepath.Join(mnt, name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkConfig runs `sluice check-config` on the container's config file,
// as mounted under dir, and checks that its listeners are the container's
// ports and listen beyond loopback (the kubelet's probes and Prometheus
// come from outside the pod).
func checkConfig(ctx context.Context, sluiceBin, dir string, c *corev1.Container) []error {
	file := filepath.Join(dir, filepath.FromSlash(configArg(c)))
	out, err := exec.CommandContext(ctx, sluiceBin, "check-config", file).CombinedOutput()
	if err != nil {
		return []error{fmt.Errorf("sluice check-config %s: %v\n%s", configArg(c), err, out)}
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return []error{err}
	}
	var cfg struct {
		Server struct {
			Listen, Admin string
		}
		Service *struct {
			GRPC string `json:"grpc"`
			HTTP string `json:"http"`
		}
		Upstream any
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return []error{err}
	}
	var errs []error
	want := func(field, addr, port string) {
		if addr == "" {
			errs = append(errs, fmt.Errorf("%s: not set (its default is on loopback, out of the kubelet's and Prometheus's reach)", field))
			return
		}
		host, p, err := net.SplitHostPort(addr)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", field, err))
			return
		}
		if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
			errs = append(errs, fmt.Errorf("%s: %s is on loopback, out of reach from outside the pod", field, addr))
		}
		cp := ""
		for _, x := range c.Ports {
			if x.Name == port {
				cp = strconv.Itoa(int(x.ContainerPort))
			}
		}
		if p != cp {
			errs = append(errs, fmt.Errorf("%s: port %s, but the container's port %s is %q", field, p, port, cp))
		}
	}
	want("server.admin", cfg.Server.Admin, "admin")
	if cfg.Upstream != nil {
		want("server.listen", cfg.Server.Listen, "http")
	}
	if cfg.Service != nil {
		want("service.grpc", cfg.Service.GRPC, "grpc")
		if cfg.Service.HTTP != "" {
			want("service.http", cfg.Service.HTTP, "http")
		}
	}
	return errs
}

// checkIstio checks that each EnvoyFilter's rate limit filter calls the
// gRPC port of a Service of the way, by the name Istio gives its cluster,
// for a domain that the Service's pods configure.
func (w way) checkIstio() []error {
	var errs []error
	filters := all[*envoyFilter](w)
	for _, f := range filters {
		for i, p := range f.spec.GetConfigPatches() {
			var hf hcmv3.HttpFilter
			if p.GetApplyTo() != istionet.EnvoyFilter_HTTP_FILTER || envoyMessage(p, &hf) != nil {
				continue
			}
			m, err := hf.GetTypedConfig().UnmarshalNew()
			rl, ok := m.(*ratelimitv3.RateLimit)
			if err != nil || !ok {
				continue
			}
			fail := func(format string, args ...any) {
				errs = append(errs, fmt.Errorf("EnvoyFilter %s: configPatches[%d]: %s", f.Name, i, fmt.Sprintf(format, args...)))
			}
			cluster := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
			// outbound|PORT||NAME.NAMESPACE.svc.cluster.local
			parts := strings.Split(cluster, "|")
			if len(parts) != 4 || parts[0] != "outbound" || parts[2] != "" {
				fail("cluster_name %q is not Istio's outbound|PORT||HOST", cluster)
				continue
			}
			host := strings.Split(parts[3], ".")
			if len(host) != 5 || strings.Join(host[2:], ".") != "svc.cluster.local" {
				fail("cluster_name %q: host is not NAME.NAMESPACE.svc.cluster.local", cluster)
				continue
			}
			var svc *corev1.Service
			for _, s := range all[*corev1.Service](w) {
				if s.Name == host[0] {
					svc = s
				}
			}
			if svc == nil {
				fail("cluster_name %q: no Service %s", cluster, host[0])
				continue
			}
			if !slices.ContainsFunc(svc.Spec.Ports, func(sp corev1.ServicePort) bool {
				return sp.Name == "grpc" && strconv.Itoa(int(sp.Port)) == parts[1]
			}) {
				fail("cluster_name %q: port %s is not Service %s's grpc port", cluster, parts[1], svc.Name)
			}
			if a := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetAuthority(); a != "" && a != parts[3] {
				fail("authority %q is not the cluster's host %s", a, parts[3])
			}
			if !w.configuresDomain(host[1], rl.GetDomain()) {
				fail("domain %q: no descriptor file of a ConfigMap in namespace %s configures it", rl.GetDomain(), host[1])
			}
		}
	}
	return errs
}

// configuresDomain reports whether a ConfigMap in namespace ns holds a
// descriptor file of domain.
func (w way) configuresDomain(ns, domain string) bool {
	for _, cm := range all[*corev1.ConfigMap](w) {
		if cm.Namespace != "" && cm.Namespace != ns {
			continue
		}
		for _, v := range cm.Data {
			var d struct {
				Domain string `json:"domain"`
			}
			if yaml.Unmarshal([]byte(v), &d) == nil && d.Domain == domain {
				return true
			}
		}
	}
	return false
}
