// Package state is a rig's state directory (docs/loop-contract.md, "The
// state directory"): the agent's memory (memory.md), its daily logs, the jobs
// it created, the skills it can load, session snapshots and traces. One
// process at a time may write it: Open takes an exclusive file lock and fails
// when another holder has it.
//
// Layout under the root:
//
//	memory.md              what the agent saved (save_memory, update_memory)
//	logs/YYYY-MM-DD.md     one file per UTC day, one entry per "## HH:MM:SS" block (append_log)
//	jobs.json              the agent's jobs (create_job, finish_job)
//	skills/<name>/SKILL.md skills kept on the rig (mounted ConfigMaps add more folders)
//	snapshots/<key>.json   the newest snapshot of an attempt (engine/snapshot)
//	traces/<key>/          an attempt's events and screens (engine/snapshot)
//	.lock                  the write lock
package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// ErrLocked is returned by Open when another process holds the state directory.
var ErrLocked = errors.New("the state directory is locked by another process")

// Dir is an open, locked state directory.
type Dir struct {
	root string
	lock *os.File
	mu   sync.Mutex // serialises writers inside this process
}

// Open creates the directory (if needed) and takes its exclusive lock, so two
// processes can never write one rig's state at once. It does not wait: a
// held lock is an error that says so.
func Open(root string) (*Dir, error) {
	if root == "" {
		return nil, errors.New("state directory: no path given")
	}
	for _, sub := range []string{"", "logs", "skills", "snapshots", "traces"} {
		if err := os.MkdirAll(filepath.Join(root, sub), 0o755); err != nil {
			return nil, fmt.Errorf("state directory %s: %w", root, err)
		}
	}
	f, err := os.OpenFile(filepath.Join(root, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("state directory %s: lock file: %w", root, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w (another loop is running on this rig)", root, ErrLocked)
		}
		return nil, fmt.Errorf("state directory %s: lock: %w", root, err)
	}
	_ = f.Truncate(0)
	_, _ = fmt.Fprintf(f, "%d\n", os.Getpid())
	return &Dir{root: root, lock: f}, nil
}

// Root is the directory's path.
func (d *Dir) Root() string { return d.root }

// Path joins elements under the root.
func (d *Dir) Path(elem ...string) string {
	return filepath.Join(append([]string{d.root}, elem...)...)
}

// Close releases the lock.
func (d *Dir) Close() error {
	if d == nil || d.lock == nil {
		return nil
	}
	err := d.lock.Close() // closing the descriptor drops the flock
	d.lock = nil
	return err
}

// WriteFileAtomic writes data to path through a temporary file in the same
// directory: write, fsync, rename, fsync the directory. A reader sees the old
// file or the new one, never a torn one, and the new one survives a power cut.
func WriteFileAtomic(path string, data []byte) error { return writeFile(path, data, true, true) }

// WriteFileAtomicNoSync is WriteFileAtomic without the fsyncs: atomic for
// every reader and across a killed process, but a power cut may lose it.
func WriteFileAtomicNoSync(path string, data []byte) error {
	return writeFile(path, data, false, false)
}

// WriteFileAtomicSyncFile fsyncs the file but not the directory: a power cut
// leaves the new file or the previous one, whole (the snapshot's trade: one
// fsync per turn instead of two).
func WriteFileAtomicSyncFile(path string, data []byte) error {
	return writeFile(path, data, true, false)
}

func writeFile(path string, data []byte, syncFile, syncDir bool) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	name := tmp.Name()
	fail := func(err error) error {
		tmp.Close()
		os.Remove(name)
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		return fail(err)
	}
	if syncFile {
		if err := tmp.Sync(); err != nil {
			return fail(err)
		}
	}
	if err := tmp.Close(); err != nil {
		os.Remove(name)
		return err
	}
	if err := os.Rename(name, path); err != nil {
		os.Remove(name)
		return err
	}
	if !syncDir {
		return nil
	}
	if df, err := os.Open(dir); err == nil {
		_ = df.Sync()
		df.Close()
	}
	return nil
}
