package followup

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
)

// The names the follow-up machinery gives what it creates. Every one fits
// its kind's limit whatever the names it is made from: a name that would not
// is shortened and given a short hash of the whole, so distinct inputs stay
// distinct.

const (
	// maxCronJobName is the API server's limit on CronJob names: their Jobs
	// add "-<minute>" (8 digits) and must stay a 63-character label value.
	maxCronJobName = 52
	// jobMinuteRoom is what a firing adds to an agent job's run prefix:
	// "-" and the scheduled minute (minutes since 1970, 8 digits until 2160).
	jobMinuteRoom = 10
	// hashLen is the length of the hash a shortened name ends with.
	hashLen = 6
)

// ChildName is the deterministic name of the follow-up at position chain of
// the chain started by root: <root>-f<N>, with root shortened and hashed when
// the whole would pass farmv1.MaxNameLength.
func ChildName(root string, chain int32) string {
	return fitName(root, fmt.Sprintf("-f%d", chain))
}

// ChildNameFor is the follow-up's name when ChildName is held by a run
// another parent made (an earlier run of the same name left it):
// <root>-f<N>-<hash of the parent's UID>, shortened like ChildName.
func ChildNameFor(n Next, parent types.UID) string {
	return fitName(n.Root, fmt.Sprintf("-f%d-%s", n.Chain, shortHash(string(parent))))
}

// IsChildOf reports whether run was made for parent: it carries parent's UID.
// A run of the right name without it belongs to some other parent.
func IsChildOf(run, parent *farmv1.AgentRun) bool {
	return parent.UID != "" && run.Labels[farmv1.LabelParentUID] == string(parent.UID)
}

// WaitCronJobName names the CronJob of a run's WAIT follow-up (at most 51
// characters, as run names are at most farmv1.MaxNameLength).
func WaitCronJobName(run string) string { return run + "-fu" }

// AgentJobCronJobName names the CronJob of an agent-created job on a rig.
func AgentJobCronJobName(rig, id string) string {
	return dnsName("job-"+rig+"-"+id, maxCronJobName)
}

// agentJobRunPrefix is the name of an agent job's runs before a firing adds
// its minute.
func agentJobRunPrefix(rig, id string) string {
	return dnsName(rig+"-"+id, farmv1.MaxNameLength-jobMinuteRoom)
}

// fitName is base+suffix when that fits farmv1.MaxNameLength; otherwise base
// is cut and ends with a hash of the whole base before the suffix.
func fitName(base, suffix string) string {
	if len(base)+len(suffix) <= farmv1.MaxNameLength {
		return base + suffix
	}
	keep := farmv1.MaxNameLength - len(suffix) - hashLen - 1
	return strings.TrimRight(base[:max(keep, 0)], "-.") + "-" + shortHash(base) + suffix
}

var notDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// dnsName lowercases s into a DNS-1123 name of at most n bytes; when it has to
// shorten or change s, a hash of the whole keeps distinct inputs distinct.
func dnsName(s string, n int) string {
	out := strings.Trim(notDNS.ReplaceAllString(strings.ToLower(s), "-"), "-")
	if len(out) <= n && out == s {
		return out
	}
	if len(out) > n-hashLen-1 {
		out = strings.TrimRight(out[:n-hashLen-1], "-")
	}
	if out == "" {
		return shortHash(s) // nothing of s is a DNS name: the hash alone is one
	}
	return out + "-" + shortHash(s)
}

func dnsLabel(s string) string { return dnsName(s, 63) }

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:hashLen]
}
