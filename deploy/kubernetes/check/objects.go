package check

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	istionet "istio.io/api/networking/v1alpha3"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	// The Envoy filters the EnvoyFilter patches may name in typed_config:
	// registered so that their Any values decode into their types.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
)

// object is one decoded document of a manifest.
type object struct {
	source string // the file or value set, and the document's index
	kind   string // apiVersion and kind: "apps/v1 Deployment"
	meta   metav1.ObjectMeta
	// obj is the decoded object: *appsv1.Deployment, *corev1.Service,
	// *corev1.ConfigMap, *policyv1.PodDisruptionBudget,
	// *autoscalingv2.HorizontalPodAutoscaler, *monitoringv1.ServiceMonitor
	// or *envoyFilter.
	obj any
}

func (o object) String() string { return fmt.Sprintf("%s %s (%s)", o.kind, o.meta.Name, o.source) }

// envoyFilter is an Istio EnvoyFilter: its spec decoded by protojson into
// Istio's own type, which is generated from Istio's protobuf definitions
// (the Kubernetes wrapper types of istio.io/client-go add nothing to check
// and a client's dependencies). Its patches' values are Envoy config,
// checked against Envoy's types (see checkEnvoyPatch).
type envoyFilter struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              json.RawMessage `json:"spec"`

	spec *istionet.EnvoyFilter
}

// newObject returns the Go value that a document of apiVersion and kind
// decodes into, or nil for a kind this package does not know.
func newObject(apiVersion, kind string) any {
	switch apiVersion + " " + kind {
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}
	case "v1 Service":
		return &corev1.Service{}
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return &monitoringv1.ServiceMonitor{}
	case "networking.istio.io/v1alpha3 EnvoyFilter":
		return &envoyFilter{}
	}
	return nil
}

// decodeAll decodes every document of a multi-document YAML stream. A
// document holding only comments is skipped.
func decodeAll(source string, data []byte) ([]object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []object
	var errs []error
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", source, err)
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s#%d: %w", source, i, err))
			continue
		}
		if string(bytes.TrimSpace(j)) == "null" {
			continue
		}
		o, err := decode(fmt.Sprintf("%s#%d", source, i), doc)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, o)
	}
	return out, errors.Join(errs...)
}

// decode decodes one document strictly into the type of its kind: an
// unknown field, a field given twice or a value of the wrong type is an
// error, and so is a kind without a type here.
func decode(source string, doc []byte) (object, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return object{}, fmt.Errorf("%s: %w", source, err)
	}
	o := object{source: source, kind: tm.APIVersion + " " + tm.Kind}
	v := newObject(tm.APIVersion, tm.Kind)
	if v == nil {
		return o, fmt.Errorf("%s: no Go type for %q: add one to newObject", source, o.kind)
	}
	if err := yaml.UnmarshalStrict(doc, v); err != nil {
		return o, fmt.Errorf("%s: %s: %w", source, o.kind, err)
	}
	o.obj = v
	m, ok := v.(metav1.ObjectMetaAccessor)
	if !ok {
		return o, fmt.Errorf("%s: %T has no metadata", source, v)
	}
	o.meta = *m.GetObjectMeta().(*metav1.ObjectMeta)
	if o.meta.Name == "" {
		return o, fmt.Errorf("%s: %s without metadata.name", source, o.kind)
	}
	if ef, ok := v.(*envoyFilter); ok {
		if err := ef.decodeSpec(); err != nil {
			return o, fmt.Errorf("%s: EnvoyFilter %s: %w", source, o.meta.Name, err)
		}
	}
	return o, nil
}

// strict rejects unknown fields; protojson's default already does, but the
// intent is stated.
var strict = protojson.UnmarshalOptions{DiscardUnknown: false}

// decodeSpec decodes the spec into Istio's type and each patch's value
// into Envoy's.
func (f *envoyFilter) decodeSpec() error {
	if len(f.Spec) == 0 {
		return errors.New("no spec")
	}
	f.spec = &istionet.EnvoyFilter{}
	if err := strict.Unmarshal(f.Spec, f.spec); err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	if len(f.spec.GetConfigPatches()) == 0 {
		return errors.New("spec: no configPatches")
	}
	var errs []error
	for i, p := range f.spec.GetConfigPatches() {
		if err := checkEnvoyPatch(p); err != nil {
			errs = append(errs, fmt.Errorf("configPatches[%d]: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

// validator is what go-control-plane generates for Envoy's validation
// rules (protoc-gen-validate): required fields, bounds, enums.
type validator interface{ ValidateAll() error }

// checkEnvoyPatch decodes a patch's value into the Envoy type its applyTo
// patches and checks it with Envoy's validation rules; the typed_config of
// an HTTP filter is decoded into its own type (which must be registered
// above) and checked too. A patch of another applyTo is an error, so that
// a new kind of patch gets a check here.
func checkEnvoyPatch(p *istionet.EnvoyFilter_EnvoyConfigObjectPatch) error {
	value, err := protojson.Marshal(p.GetPatch().GetValue())
	if err != nil {
		return err
	}
	switch p.GetApplyTo() {
	case istionet.EnvoyFilter_HTTP_FILTER:
		var f hcmv3.HttpFilter
		if err := strict.Unmarshal(value, &f); err != nil {
			return fmt.Errorf("patch.value as an HTTP filter: %w", err)
		}
		if err := f.ValidateAll(); err != nil {
			return fmt.Errorf("patch.value: %w", err)
		}
		tc := f.GetTypedConfig()
		if tc == nil {
			return fmt.Errorf("patch.value: filter %s without typed_config", f.GetName())
		}
		inner, err := tc.UnmarshalNew()
		if err != nil {
			return fmt.Errorf("patch.value.typed_config: %w", err)
		}
		if v, ok := inner.(validator); ok {
			if err := v.ValidateAll(); err != nil {
				return fmt.Errorf("patch.value.typed_config: %w", err)
			}
		}
		return nil
	case istionet.EnvoyFilter_VIRTUAL_HOST:
		// A MERGE patch holds part of a virtual host: its required name
		// comes from Istio, so the fields given are checked one by one.
		var vh routev3.VirtualHost
		if err := strict.Unmarshal(value, &vh); err != nil {
			return fmt.Errorf("patch.value as a virtual host: %w", err)
		}
		if len(vh.GetRateLimits()) == 0 {
			return errors.New("patch.value: a virtual host patch without rate_limits")
		}
		for i, rl := range vh.GetRateLimits() {
			if err := rl.ValidateAll(); err != nil {
				return fmt.Errorf("patch.value.rate_limits[%d]: %w", i, err)
			}
		}
		return nil
	}
	return fmt.Errorf("applyTo %s: no check for this kind of patch", p.GetApplyTo())
}

// envoyMessage decodes the value of an EnvoyFilter patch into m.
func envoyMessage(p *istionet.EnvoyFilter_EnvoyConfigObjectPatch, m proto.Message) error {
	value, err := protojson.Marshal(p.GetPatch().GetValue())
	if err != nil {
		return err
	}
	return strict.Unmarshal(value, m)
}
