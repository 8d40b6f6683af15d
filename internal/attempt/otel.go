package attempt

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// OTel is where loop pods export their OpenTelemetry spans (docs/otel.md):
// the manager's --loop-otel-* flags, the chart's otel values.
type OTel struct {
	// Endpoint is the collector's OTLP/HTTP base URL; empty: no export.
	Endpoint string
	// HeadersSecret names a Secret in the run's namespace whose key
	// OTelHeadersKey holds OTEL_EXPORTER_OTLP_HEADERS (an Authorization
	// header, say); optional, so a namespace without it exports without.
	HeadersSecret string
	// ResourceAttributes are key=value,… added to every span's resource.
	ResourceAttributes string
}

// OTelHeadersKey is the key of the headers Secret.
const OTelHeadersKey = "headers"

// The OpenTelemetry SDK's variables the loop reads (internal/telemetry).
const (
	envOTelEndpoint   = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envOTelHeaders    = "OTEL_EXPORTER_OTLP_HEADERS"
	envOTelResource   = "OTEL_RESOURCE_ATTRIBUTES"
	attrRigName       = "clawfarm.rig.name"
	attrNodeName      = "k8s.node.name"
	otelAttrSeparator = ","
)

// otelEnv is the loop container's OpenTelemetry environment: none without
// an endpoint. The resource names the rig and its node, which the loop
// does not know by itself; the run, attempt and pod it adds on its own.
func otelEnv(o OTel, rig *farmv1.DeviceRig) []corev1.EnvVar {
	if o.Endpoint == "" {
		return nil
	}
	env := []corev1.EnvVar{{Name: envOTelEndpoint, Value: o.Endpoint}}
	attrs := []string{}
	if a := strings.Trim(strings.TrimSpace(o.ResourceAttributes), otelAttrSeparator); a != "" {
		attrs = append(attrs, a)
	}
	// DNS names need no percent-encoding.
	attrs = append(attrs, attrRigName+"="+rig.Name)
	if n := rig.Spec.NodeName; n != "" {
		attrs = append(attrs, attrNodeName+"="+n)
	}
	env = append(env, corev1.EnvVar{Name: envOTelResource, Value: strings.Join(attrs, otelAttrSeparator)})
	if o.HeadersSecret != "" {
		env = append(env, corev1.EnvVar{Name: envOTelHeaders, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: o.HeadersSecret}, Key: OTelHeadersKey, Optional: ptr.To(true),
		}}})
	}
	return env
}
