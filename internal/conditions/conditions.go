// Package conditions sets status conditions the one way this project does:
// stable CamelCase reasons, observedGeneration on every condition, and the
// transition time moved only when the status changes.
package conditions

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Set records a condition on list for an object at generation.
func Set(list *[]metav1.Condition, generation int64, typ string, status metav1.ConditionStatus, reason, message string) bool {
	return meta.SetStatusCondition(list, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: message, ObservedGeneration: generation,
	})
}

// True is Set with status True.
func True(list *[]metav1.Condition, generation int64, typ, reason, message string) bool {
	return Set(list, generation, typ, metav1.ConditionTrue, reason, message)
}

// False is Set with status False.
func False(list *[]metav1.Condition, generation int64, typ, reason, message string) bool {
	return Set(list, generation, typ, metav1.ConditionFalse, reason, message)
}

// Unknown is Set with status Unknown.
func Unknown(list *[]metav1.Condition, generation int64, typ, reason, message string) bool {
	return Set(list, generation, typ, metav1.ConditionUnknown, reason, message)
}

// Remove drops the condition of type typ from list, reporting whether it
// was there. kstatus's abnormal-true conditions (Reconciling, Stalled) are
// removed rather than set False: absent reads the same to kstatus, and each
// condition a status carries is bytes that every write, watch event and
// validation of the object pays for.
func Remove(list *[]metav1.Condition, typ string) bool {
	return meta.RemoveStatusCondition(list, typ)
}

// Get returns the condition of type typ, or nil.
func Get(list []metav1.Condition, typ string) *metav1.Condition {
	return meta.FindStatusCondition(list, typ)
}

// IsTrue reports whether the condition of type typ is True.
func IsTrue(list []metav1.Condition, typ string) bool {
	return meta.IsStatusConditionTrue(list, typ)
}
