package snapshot

import (
	"os"
	"sort"
	"time"

	"github.com/clawfarm/clawfarm/internal/state"
)

// Prune keeps the traces of the newest keep attempts in the state directory
// (by the trace folder's modification time) and removes the older ones with
// their snapshots. The current attempt's are never removed. It returns the
// keys it removed; a folder it cannot remove is left for the next attempt.
func Prune(dir *state.Dir, keep int, current string) ([]string, error) {
	entries, err := os.ReadDir(dir.Path("traces"))
	if err != nil {
		return nil, err
	}
	type trace struct {
		key string
		mod time.Time
	}
	var all []trace
	for _, e := range entries {
		if !e.IsDir() || e.Name() == current {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		all = append(all, trace{e.Name(), info.ModTime()})
	}
	keep-- // the current attempt is one of them
	if len(all) <= keep {
		return nil, nil
	}
	sort.Slice(all, func(i, j int) bool { return all[i].mod.After(all[j].mod) })
	var removed []string
	for _, t := range all[max(keep, 0):] {
		if err := os.RemoveAll(dir.Path("traces", t.key)); err != nil {
			continue
		}
		_ = os.Remove(path(dir, t.key))
		removed = append(removed, t.key)
	}
	return removed, nil
}
