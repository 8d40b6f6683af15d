//go:build !linux && !darwin

package rignode

// procIdentity is unknown on this system: no process is ever adopted, so a
// restarted rignode reports its pods' processes as lost.
func procIdentity(int) (string, bool) { return "", false }
