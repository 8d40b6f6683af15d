package main

import (
	"flag"
	"fmt"
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/clawfarm/clawfarm/internal/attempt"
)

// otelFlags say where loop pods export their OpenTelemetry spans
// (docs/otel.md); the chart's otel values set them.
type otelFlags struct {
	endpoint, headersSecret, resourceAttributes *string
}

func addOTelFlags(fs *flag.FlagSet) otelFlags {
	return otelFlags{
		endpoint: fs.String("loop-otel-endpoint", "", "the OTLP/HTTP base URL loop pods export their OpenTelemetry spans to "+
			"(e.g. http://otel-collector.observability.svc:4318; spans go to its /v1/traces); empty: no export"),
		headersSecret: fs.String("loop-otel-headers-secret", "", "a Secret in each run namespace whose key "+attempt.OTelHeadersKey+
			" holds the OTLP headers (OTEL_EXPORTER_OTLP_HEADERS: key=value,…, e.g. Authorization=Basic%20…); optional in each namespace"),
		resourceAttributes: fs.String("loop-otel-resource-attributes", "", "key=value,… added to the resource of every loop span "+
			"(OTEL_RESOURCE_ATTRIBUTES); the loop adds the run, attempt and pod, the manager the rig and node"),
	}
}

// check refuses what loop pods could not use, naming the flag.
func (o otelFlags) check() error {
	if e := *o.endpoint; e != "" {
		if u, err := url.Parse(e); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("invalid value %q for flag -loop-otel-endpoint: want an http(s) URL", e)
		}
	}
	if s := *o.headersSecret; s != "" && len(validation.IsDNS1123Subdomain(s)) > 0 {
		return fmt.Errorf("invalid value %q for flag -loop-otel-headers-secret: want a Secret's name", s)
	}
	for p := range strings.SplitSeq(*o.resourceAttributes, ",") {
		if k, _, ok := strings.Cut(p, "="); strings.TrimSpace(p) != "" && (!ok || strings.TrimSpace(k) == "") {
			return fmt.Errorf("invalid value %q for flag -loop-otel-resource-attributes: want key=value pairs separated by commas", *o.resourceAttributes)
		}
	}
	return nil
}

func (o otelFlags) defaults() attempt.OTel {
	return attempt.OTel{Endpoint: *o.endpoint, HeadersSecret: *o.headersSecret, ResourceAttributes: *o.resourceAttributes}
}
