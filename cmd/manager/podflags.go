package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// jsonFlag is a flag whose value is the JSON of a Kubernetes API type (a
// corev1.ResourceRequirements, SecurityContext or PodSecurityContext). It is
// decoded strictly: an unknown field is an error, so a typo in the chart's
// values stops the manager at start, with the flag package's message naming
// the flag, instead of silently dropping a limit or a security setting. An
// empty value (or "null") means unset. check, when set, validates the decoded
// value further.
type jsonFlag[T any] struct {
	v     *T
	check func(*T) error
}

func (f *jsonFlag[T]) String() string {
	if f == nil || f.v == nil {
		return ""
	}
	b, _ := json.Marshal(f.v)
	return string(b)
}

func (f *jsonFlag[T]) Set(s string) error {
	s = strings.TrimSpace(s)
	if s == "" || s == "null" {
		f.v = nil
		return nil
	}
	var v T
	kind := reflect.TypeFor[T]().Name()
	d := json.NewDecoder(strings.NewReader(s))
	d.DisallowUnknownFields()
	if err := d.Decode(&v); err != nil {
		return fmt.Errorf("not the JSON of a core/v1 %s: %w", kind, err)
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("not the JSON of a core/v1 %s: trailing data after the object", kind)
	}
	if f.check != nil {
		if err := f.check(&v); err != nil {
			return err
		}
	}
	f.v = &v
	return nil
}

// get returns the value, nil when unset. Each caller gets its own copy.
func (f *jsonFlag[T]) get() *T {
	if f.v == nil {
		return nil
	}
	b, _ := json.Marshal(f.v)
	var v T
	_ = json.NewDecoder(bytes.NewReader(b)).Decode(&v)
	return &v
}

// resources returns the flag's ResourceRequirements, empty when unset.
func resources(f *jsonFlag[corev1.ResourceRequirements]) corev1.ResourceRequirements {
	if r := f.get(); r != nil {
		return *r
	}
	return corev1.ResourceRequirements{}
}

// checkResources refuses what the API server would refuse on every pod the
// manager then creates: a negative quantity, or a request above its limit.
func checkResources(r *corev1.ResourceRequirements) error {
	for _, l := range []corev1.ResourceList{r.Requests, r.Limits} {
		for name, q := range l {
			if q.Sign() < 0 {
				return fmt.Errorf("%s %s is negative", name, q.String())
			}
		}
	}
	for name, req := range r.Requests {
		if lim, ok := r.Limits[name]; ok && req.Cmp(lim) > 0 {
			return fmt.Errorf("the %s request %s is above its limit %s", name, req.String(), lim.String())
		}
	}
	return nil
}

// checkSecurityContext refuses user and group ids the API server refuses.
func checkSecurityContext(sc *corev1.SecurityContext) error {
	return checkIDs(sc.RunAsUser, sc.RunAsGroup)
}

func checkPodSecurityContext(sc *corev1.PodSecurityContext) error {
	if err := checkIDs(sc.RunAsUser, sc.RunAsGroup, sc.FSGroup); err != nil {
		return err
	}
	for _, g := range sc.SupplementalGroups {
		if g < 0 {
			return fmt.Errorf("supplemental group %d is negative", g)
		}
	}
	return nil
}

func checkIDs(ids ...*int64) error {
	for _, id := range ids {
		if id != nil && *id < 0 {
			return fmt.Errorf("user or group id %d is negative", *id)
		}
	}
	return nil
}
