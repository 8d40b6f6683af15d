package rignode

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// procIdentity names the process pid as it runs now: the boot it runs in and
// its start time in clock ticks since that boot (field 22 of /proc/<pid>/stat).
// Two processes that share a pid never share an identity. ok is false when no
// such process runs, or it is a zombie (it has ended; only its parent's wait
// is left).
func procIdentity(pid int) (id string, ok bool) {
	if pid <= 1 {
		return "", false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", false
	}
	// The command name (field 2) may hold spaces and parentheses: fields
	// are counted after its last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return "", false
	}
	f := strings.Fields(string(stat[i+1:]))
	// f[0] is field 3 (state), so field 22 (starttime) is f[19].
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return "", false
	}
	return bootID() + "/" + f[19], true
}

func bootID() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
}
