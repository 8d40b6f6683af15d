package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/clawfarm/clawfarm/internal/contract"
	"github.com/clawfarm/clawfarm/internal/engine"
)

// loadBootstrap reads the context files of the system prompt: each folder
// (a mounted ConfigMap, named <NN>-<rig|run>-<configmap> by the operator)
// in the order given, each file in name order. A file over
// contract.MaxBootstrapFileBytes, all of them over contract.MaxBootstrapBytes,
// or one that is not UTF-8 text is a bad configuration: the error names the
// file, its size and what to change. A missing folder is an error too (the
// operator mounts every one it lists).
func loadBootstrap(dirs []string) ([]engine.BootstrapFile, error) {
	var out []engine.BootstrapFile
	total := 0
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("%s: bootstrap folder %s: %w", name(contract.SettingBootstrapDirs), dir, err)
		}
		source := bootstrapSource(dir)
		var names []string
		for _, e := range entries {
			// A ConfigMap volume keeps its data behind ..data and
			// timestamped folders; its keys are the names without dots.
			if !strings.HasPrefix(e.Name(), ".") {
				names = append(names, e.Name())
			}
		}
		sort.Strings(names)
		for _, n := range names {
			p := filepath.Join(dir, n)
			fi, err := os.Stat(p) // keys are symlinks into ..data
			if err != nil {
				return nil, fmt.Errorf("bootstrap file %s/%s: %w", source, n, err)
			}
			if fi.IsDir() {
				continue
			}
			if fi.Size() > contract.MaxBootstrapFileBytes {
				return nil, fmt.Errorf("bootstrap file %s/%s is %d bytes, over the %d a context file may have: shorten it or split it into several keys",
					source, n, fi.Size(), contract.MaxBootstrapFileBytes)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return nil, fmt.Errorf("bootstrap file %s/%s: %w", source, n, err)
			}
			if !utf8.Valid(b) {
				return nil, fmt.Errorf("bootstrap file %s/%s is not UTF-8 text: a system prompt takes text only", source, n)
			}
			if total += len(b); total > contract.MaxBootstrapBytes {
				return nil, fmt.Errorf("the bootstrap files come to more than %d bytes at %s/%s: every request carries them; keep the rig's and the run's context files under that together",
					contract.MaxBootstrapBytes, source, n)
			}
			out = append(out, engine.BootstrapFile{Source: source, Name: n, Text: string(b)})
		}
	}
	return out, nil
}

// bootstrapSource names a bootstrap folder as the prompt shows it: "rig/<configmap>"
// or "run/<configmap>" for the operator's <NN>-<owner>-<configmap>, else the folder's name.
func bootstrapSource(dir string) string {
	base := filepath.Base(dir)
	if _, rest, ok := strings.Cut(base, "-"); ok {
		if owner, cm, ok := strings.Cut(rest, "-"); ok && (owner == "rig" || owner == "run") {
			return owner + "/" + cm
		}
	}
	return base
}
