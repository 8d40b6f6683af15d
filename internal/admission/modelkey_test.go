package admission

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestCheckModelKeySecret(t *testing.T) {
	secret := func(labels map[string]string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "key", Labels: labels}}
	}
	if err := CheckModelKeySecret(secret(map[string]string{LabelModelKey: "true"})); err != nil {
		t.Errorf("a labelled model key is refused: %v", err)
	}
	for name, s := range map[string]*corev1.Secret{
		"no labels":          secret(nil),
		"label false":        secret(map[string]string{LabelModelKey: "false"}),
		"label True":         secret(map[string]string{LabelModelKey: "True"}),
		"label empty":        secret(map[string]string{LabelModelKey: ""}),
		"another label only": secret(map[string]string{"app": "db"}),
	} {
		err := CheckModelKeySecret(s)
		if err == nil {
			t.Errorf("%s: the Secret is accepted as a model key", name)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, "farm.clawfarm.dev/model-key=true") || !strings.Contains(msg, "team-a/key") || strings.Contains(msg, "\n") {
			t.Errorf("%s: the message does not name the Secret and the label on one line: %q", name, msg)
		}
	}
	if err := CheckModelKeySecret(nil); err == nil {
		t.Error("a nil Secret is accepted")
	}
}
