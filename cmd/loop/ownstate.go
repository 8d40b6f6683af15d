package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/clawfarm/clawfarm/internal/contract"
)

// ownState gives the rig's state directory to the user the loop runs as. A
// kubelet creates a missing hostPath directory root:root 0755, where a
// non-root loop cannot write; fsGroup does not apply to hostPath volumes. It
// runs as root with CAP_CHOWN and CAP_FOWNER only, changes the directory
// itself (what the loop writes inside is the loop's own) and nothing else.
// Not root (rignode runs every container as its own user, who owns the
// directory already), it leaves the directory as it is.
func ownState(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(contract.OwnStateCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", contract.StateMountPath, "the rig's state directory")
	uid := fs.Int("uid", -1, "the loop's user")
	gid := fs.Int("gid", -1, "the loop's group (-1: leave the group)")
	if err := fs.Parse(args); err != nil {
		return contract.ExitInvalidConfig
	}
	if *uid < 0 {
		return ownStateFailed(stderr, errors.New("--uid: want the loop's user id (0 or more)"))
	}
	msg, err := takeOwnership(*dir, *uid, *gid, os.Geteuid())
	if err != nil {
		return ownStateFailed(stderr, err)
	}
	fmt.Fprintln(stdout, "loop own-state: "+msg)
	return 0
}

// takeOwnership is ownState's work for the process user euid.
func takeOwnership(dir string, uid, gid, euid int) (string, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("the rig's state directory: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("the rig's state directory %s is not a directory", dir)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	if st == nil {
		return "", fmt.Errorf("the rig's state directory %s: no owner information on this system", dir)
	}
	perm := fi.Mode().Perm()
	owned := int(st.Uid) == uid && (gid < 0 || int(st.Gid) == gid) && perm&0o700 == 0o700
	switch {
	case owned:
		return fmt.Sprintf("%s already belongs to uid %d (mode %04o)", dir, uid, perm), nil
	case euid != 0:
		return fmt.Sprintf("running as uid %d, not root: %s stays uid %d gid %d mode %04o", euid, dir, st.Uid, st.Gid, perm), nil
	}
	// Owner rights first, while root still owns it, then the owner.
	if perm&0o700 != 0o700 {
		if err := os.Chmod(dir, fs.FileMode(perm|0o700)); err != nil {
			return "", fmt.Errorf("the rig's state directory: %w", err)
		}
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return "", fmt.Errorf("the rig's state directory: %w (the init step needs CAP_CHOWN)", err)
	}
	return fmt.Sprintf("%s now belongs to uid %d (was uid %d gid %d mode %04o)", dir, uid, st.Uid, st.Gid, perm), nil
}

// ownStateFailed reports why the init step could not give the directory
// away: on stderr and in the termination log, with exit code 2, which the
// operator records as InvalidConfig (nothing a fresh attempt would change).
func ownStateFailed(stderr io.Writer, err error) int {
	text := "loop own-state: " + err.Error()
	fmt.Fprintln(stderr, text)
	_ = os.WriteFile(contract.DefaultTerminationLog, []byte(text), 0o644)
	return contract.ExitInvalidConfig
}

// unwritableState explains a state directory the loop's user cannot write
// (err from opening it): a configuration error of the rig's node, which no
// fresh attempt fixes, so the loop exits 2 and the run fails InvalidConfig.
// Other errors (another loop holds the lock) give nil.
func unwritableState(dir string, err error) error {
	if err == nil || (!errors.Is(err, fs.ErrPermission) && !errors.Is(err, syscall.EROFS)) {
		return nil
	}
	owner := ""
	if fi, serr := os.Stat(dir); serr == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			owner = fmt.Sprintf(" (uid %d gid %d, mode %04o)", st.Uid, st.Gid, fi.Mode().Perm())
		}
	}
	return fmt.Errorf("the rig's state directory %s%s is not writable by the loop's user, uid %d: %v; "+
		"give it to that user on the rig's node, or let the pod's own-state init step do it (docs/loop-contract.md, \"The state directory\")",
		dir, owner, os.Geteuid(), err)
}
