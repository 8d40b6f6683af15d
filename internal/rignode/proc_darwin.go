package rignode

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// zombie is SZOMB of <sys/proc.h>: a process that has ended, not yet waited for.
const zombie = 5

// procIdentity names the process pid as it runs now: its start time, which
// two processes that share a pid never share. ok is false when no such
// process runs, or it is a zombie.
func procIdentity(pid int) (id string, ok bool) {
	if pid <= 1 {
		return "", false
	}
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil || kp.Proc.P_pid != int32(pid) || kp.Proc.P_stat == zombie {
		return "", false
	}
	t := kp.Proc.P_starttime
	return fmt.Sprintf("%d.%06d", t.Sec, t.Usec), true
}
