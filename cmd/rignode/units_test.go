package main

import (
	"bufio"
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	farmv1 "github.com/clawfarm/clawfarm/api/v1alpha1"
	"github.com/clawfarm/clawfarm/internal/attempt"
	"github.com/clawfarm/clawfarm/internal/riggate"
	"github.com/clawfarm/clawfarm/internal/rignode"
)

// The rig-host units (config/rig-host) start rignode and its gateway with
// flags rignode must take: each unit's ExecStart, its variables filled from
// the sample env file shipped beside it, and each launchd plist's
// ProgramArguments are parsed with rignode's own flag sets, and must carry
// what a rig host needs (credentials, the rig taint, an image allow-list or
// map, the kubelet API's client CA; the gateway's address and rigs).

const (
	rigHostDir = "../../config/rig-host"
	// binary is where the units and plists expect rignode (the README's
	// install step puts it there).
	binary = "/usr/local/bin/rignode"
	// launchdLogDir is where the plists send rignode's output.
	launchdLogDir = "/usr/local/var/log/clawfarm/"
)

func TestRigHostSystemdUnitsRunRealFlags(t *testing.T) {
	units, _ := filepath.Glob(filepath.Join(rigHostDir, "systemd", "*.service"))
	if len(units) != 2 {
		t.Fatalf("config/rig-host/systemd has %d units (%v), want clawfarm-rignode.service and clawfarm-rig-gateway.service", len(units), units)
	}
	users := sysusers(t, filepath.Join(rigHostDir, "systemd", "sysusers.d", "clawfarm.conf"))
	seen := map[string]bool{}
	for _, file := range units {
		t.Run(filepath.Base(file), func(t *testing.T) {
			u := parseUnit(t, file)
			svc := u["Service"]
			env := map[string]string{}
			for _, ef := range svc["EnvironmentFile"] {
				sample := filepath.Join(filepath.Dir(file), path.Base(strings.TrimPrefix(ef, "-"))+".example")
				for k, v := range readEnvFile(t, sample) {
					env[k] = v
				}
			}
			if len(svc["ExecStart"]) != 1 {
				t.Fatalf("ExecStart given %d times, want once", len(svc["ExecStart"]))
			}
			argv, used, err := expandExec(svc["ExecStart"][0], env)
			if err != nil {
				t.Fatalf("ExecStart: %v", err)
			}
			for k := range env {
				if !used[k] {
					t.Errorf("the sample env file sets %s, which ExecStart does not use", k)
				}
			}
			cmd := checkCommand(t, argv)
			seen[cmd] = true

			one := func(key string) string {
				if v := svc[key]; len(v) == 1 {
					return v[0]
				}
				t.Errorf("[Service] %s = %q, want it set once", key, svc[key])
				return ""
			}
			if r := one("Restart"); r != "always" {
				t.Errorf("Restart=%s, want always", r)
			}
			user := one("User")
			if user == "" || user == "root" || !users[user] {
				t.Errorf("User=%s: want a user of its own that sysusers.d/clawfarm.conf creates (it creates %v)", user, keys(users))
			}
			if cmd == "rignode" {
				// The shims and the pods' processes outlive a rignode restart.
				if k := one("KillMode"); k != "process" {
					t.Errorf("KillMode=%s: want process, or a restart of the unit kills every session on the host", k)
				}
				// The per-pod directories and the rigs' state root are the
				// unit's state directories, so they are this user's and writable.
				dirs := strings.Fields(strings.Join(svc["StateDirectory"], " "))
				root := flagValue(argv, "root-dir")
				if !slices.Contains(dirs, strings.TrimPrefix(root, "/var/lib/")) {
					t.Errorf("--root-dir=%s is not one of the StateDirectory= entries %v", root, dirs)
				}
				if !slices.Contains(dirs, strings.TrimPrefix(attempt.DefaultRigStateRoot, "/var/lib/")) {
					t.Errorf("StateDirectory=%v leaves out the rigs' state root %s", dirs, attempt.DefaultRigStateRoot)
				}
			}
			verifyUnit(t, file)
		})
	}
	if !t.Failed() && (!seen["rignode"] || !seen["gateway"]) {
		t.Errorf("the units start %v, want rignode and rignode gateway", keys(seen))
	}
}

func TestRigHostLaunchdPlistsRunRealFlags(t *testing.T) {
	plists, _ := filepath.Glob(filepath.Join(rigHostDir, "launchd", "*.plist"))
	if len(plists) != 2 {
		t.Fatalf("config/rig-host/launchd has %d plists (%v), want dev.clawfarm.rignode.plist and dev.clawfarm.rig-gateway.plist", len(plists), plists)
	}
	seen := map[string]bool{}
	for _, file := range plists {
		t.Run(filepath.Base(file), func(t *testing.T) {
			d := readPlist(t, file)
			if got, want := d["Label"], strings.TrimSuffix(filepath.Base(file), ".plist"); got != want {
				t.Errorf("Label = %v, want %q (the file's name)", got, want)
			}
			raw, ok := d["ProgramArguments"].([]any)
			if !ok || len(raw) == 0 {
				t.Fatalf("ProgramArguments = %v, want an array of strings", d["ProgramArguments"])
			}
			var argv []string
			for _, a := range raw {
				s, ok := a.(string)
				if !ok {
					t.Fatalf("ProgramArguments holds %v, want strings only", a)
				}
				argv = append(argv, s)
			}
			cmd := checkCommand(t, argv)
			seen[cmd] = true
			for _, key := range []string{"RunAtLoad", "KeepAlive"} {
				if d[key] != true {
					t.Errorf("%s = %v, want true", key, d[key])
				}
			}
			if u, _ := d["UserName"].(string); u == "" || u == "root" {
				t.Errorf("UserName = %v, want a user of its own", d["UserName"])
			}
			for _, key := range []string{"StandardOutPath", "StandardErrorPath"} {
				if p, _ := d[key].(string); !strings.HasPrefix(p, launchdLogDir) || path.Clean(p) != p {
					t.Errorf("%s = %v, want a file under %s", key, d[key], launchdLogDir)
				}
			}
			if cmd == "rignode" {
				// The shims are in sessions of their own; launchd must not
				// reap what is left of rignode's group either.
				if d["AbandonProcessGroup"] != true {
					t.Errorf("AbandonProcessGroup = %v, want true", d["AbandonProcessGroup"])
				}
				if m := flagValue(argv, "image-map-file"); m != "" {
					sample := filepath.Join(filepath.Dir(file), filepath.Base(m)+".example")
					images, err := rignode.LoadImageMapFile(sample)
					if err != nil {
						t.Fatal(err)
					}
					if !hasLoop(images.Images()) {
						t.Errorf("%s maps %v: want the loop image mapped to a darwin loop", sample, images.Images())
					}
				}
			}
		})
	}
	if !t.Failed() && (!seen["rignode"] || !seen["gateway"]) {
		t.Errorf("the plists start %v, want rignode and rignode gateway", keys(seen))
	}
}

// The kubelet host's tmpfiles snippet makes the rigs' state root, root's
// and private, where the DeviceRigs' default hostPath volumes live.
func TestRigHostTmpfilesMakesTheStateRoot(t *testing.T) {
	file := filepath.Join(rigHostDir, "systemd", "tmpfiles.d", "clawfarm.conf")
	found := false
	for _, f := range configLines(t, file) {
		if len(f) < 5 {
			t.Errorf("%s: %q: want Type Path Mode User Group [Age]", file, strings.Join(f, " "))
			continue
		}
		if f[0] != "d" {
			t.Errorf("%s: %q: want only d lines (create, never clean)", file, strings.Join(f, " "))
		}
		if f[1] == attempt.DefaultRigStateRoot {
			found = true
			if f[2] != "0700" || f[3] != "root" || f[4] != "root" {
				t.Errorf("%s: %s is %s %s:%s, want 0700 root:root", file, f[1], f[2], f[3], f[4])
			}
		}
	}
	if !found {
		t.Errorf("%s does not create %s", file, attempt.DefaultRigStateRoot)
	}
}

// checkCommand parses argv as rignode would (main's dispatch, then the
// command's flag set) and checks what a rig host needs. It returns the
// command: "rignode" or "gateway".
func checkCommand(t *testing.T, argv []string) string {
	t.Helper()
	if len(argv) == 0 || argv[0] != binary {
		t.Fatalf("the command %q does not start with %s", argv, binary)
	}
	args := argv[1:]
	var fs *flag.FlagSet
	cmd, name := "rignode", "rignode"
	var gw *gatewayFlags
	var node *runFlags
	switch {
	case len(args) > 0 && args[0] == "gateway":
		cmd, name, args = "gateway", "rignode gateway", args[1:]
		fs, gw = newGatewayFlags()
	case len(args) > 0 && args[0] == "shim":
		t.Fatalf("%q: shim is rignode's own, not a command to start", argv)
	default:
		fs, node = newRunFlags()
	}
	var out bytes.Buffer
	fs.SetOutput(&out)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("%s does not take %q: %v", name, args, err)
	}
	if fs.NArg() > 0 {
		t.Fatalf("%s: %q are not flags: rignode would ignore them", name, fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	need := func(names ...string) {
		for _, n := range names {
			if !set[n] || fs.Lookup(n).Value.String() == "" {
				t.Errorf("%s: --%s is missing or empty", name, n)
			}
		}
	}
	switch cmd {
	case "gateway":
		need("kubeconfig", "listen", "rig")
		if _, err := riggate.ParseRigs(gw.rigs); err != nil {
			t.Errorf("rignode gateway --rig: %v", err)
		}
		if host, port, err := net.SplitHostPort(*gw.listen); err != nil || host == "" || port != "8050" {
			t.Errorf("rignode gateway --listen=%s: want the host's address on the rig network, port 8050", *gw.listen)
		}
	default:
		need("kubeconfig", "node-name", "root-dir", "client-ca-file", "register-with-taints")
		if *node.anonymous {
			t.Errorf("rignode --anonymous-auth serves every pod's logs to anyone: a rig host uses --client-ca-file")
		}
		// What runs here: the registry's clawfarm images, or (a Mac) the
		// mapped host programs alone.
		if *node.pullImages {
			need("allowed-images")
		} else {
			need("image-map-file")
		}
		taints, err := rignode.ParseTaints(*node.taints)
		if err != nil {
			t.Errorf("rignode --register-with-taints: %v", err)
		}
		tainted := false
		for _, tn := range taints {
			tainted = tainted || tn.Key == farmv1.TaintRig && tn.Effect == corev1.TaintEffectNoSchedule
		}
		if !tainted {
			t.Errorf("rignode --register-with-taints=%s: want %s=true:NoSchedule, so that only loop pods land on the host", *node.taints, farmv1.TaintRig)
		}
		if _, err := rignode.ParseLabels(*node.labels); err != nil {
			t.Errorf("rignode --node-labels: %v", err)
		}
		if !filepath.IsAbs(*node.rootDir) {
			t.Errorf("rignode --root-dir=%s: want an absolute path", *node.rootDir)
		}
	}
	return cmd
}

// flagValue is the last value argv gives --name (in the --name=value form
// the units use), or "".
func flagValue(argv []string, name string) string {
	v := ""
	for _, a := range argv {
		if s, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			v = s
		}
	}
	return v
}

// unit is a systemd unit file: section → key → values, in order.
type unit map[string]map[string][]string

// parseUnit reads a unit file as systemd does: comment lines (# or ;),
// lines continued by a trailing backslash, [Section] headers, Key=Value.
func parseUnit(t *testing.T, file string) unit {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	u := unit{}
	section, pending := "", ""
	for n, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if pending == "" && (trimmed == "" || trimmed[0] == '#' || trimmed[0] == ';') {
			continue
		}
		if pending != "" && (strings.HasPrefix(trimmed, "#") || strings.HasPrefix(trimmed, ";")) {
			continue // a comment inside a continued line
		}
		if s, ok := strings.CutSuffix(trimmed, "\\"); ok {
			pending += s + " "
			continue
		}
		logical := pending + trimmed
		pending = ""
		if strings.HasPrefix(logical, "[") && strings.HasSuffix(logical, "]") {
			section = logical[1 : len(logical)-1]
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
			continue
		}
		k, v, ok := strings.Cut(logical, "=")
		if !ok || section == "" {
			t.Fatalf("%s:%d: %q is neither a [Section] nor Key=Value in one", file, n+1, logical)
		}
		u[section][strings.TrimSpace(k)] = append(u[section][strings.TrimSpace(k)], strings.TrimSpace(v))
	}
	if pending != "" {
		t.Fatalf("%s ends in a continued line", file)
	}
	return u
}

// readEnvFile reads an EnvironmentFile: KEY=VALUE lines, # and ; comments,
// a value optionally in quotes.
func readEnvFile(t *testing.T, file string) map[string]string {
	t.Helper()
	env := map[string]string{}
	f, err := os.Open(file)
	if err != nil {
		t.Fatalf("the sample env file of an EnvironmentFile: %v", err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || !envName.MatchString(k) {
			t.Fatalf("%s:%d: %q is not NAME=value", file, n, line)
		}
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		if _, dup := env[k]; dup {
			t.Errorf("%s:%d: %s is set twice", file, n, k)
		}
		env[k] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return env
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// expandExec turns an ExecStart value into argv as systemd does: the
// prefixes (-, @, :, +, !) dropped, words split at spaces with "…" and '…'
// quoting, ${NAME} replaced by the value within its word, a word that is
// $NAME alone replaced by the value split at spaces (zero or more words),
// $$ a $. It refuses a variable env does not set and a % specifier.
func expandExec(line string, env map[string]string) (argv []string, used map[string]bool, err error) {
	used = map[string]bool{}
	line = strings.TrimLeft(strings.TrimSpace(line), "-@:+!")
	words, err := splitWords(line)
	if err != nil {
		return nil, nil, err
	}
	lookup := func(name string) (string, error) {
		v, ok := env[name]
		if !ok {
			return "", fmt.Errorf("$%s is not set by the sample env file", name)
		}
		used[name] = true
		return v, nil
	}
	for _, w := range words {
		if strings.Contains(strings.ReplaceAll(w, "%%", ""), "%") {
			return nil, nil, fmt.Errorf("%q: a %% specifier; write %%%% for a %%", w)
		}
		w = strings.ReplaceAll(w, "%%", "%")
		if m := wholeVar.FindStringSubmatch(w); m != nil {
			v, err := lookup(m[1])
			if err != nil {
				return nil, nil, err
			}
			argv = append(argv, strings.Fields(v)...)
			continue
		}
		var b strings.Builder
		for i := 0; i < len(w); i++ {
			switch {
			case strings.HasPrefix(w[i:], "$$"):
				b.WriteByte('$')
				i++
			case strings.HasPrefix(w[i:], "${"):
				end := strings.IndexByte(w[i:], '}')
				if end < 0 {
					return nil, nil, fmt.Errorf("%q: ${ without }", w)
				}
				v, err := lookup(w[i+2 : i+end])
				if err != nil {
					return nil, nil, err
				}
				b.WriteString(v)
				i += end
			case w[i] == '$':
				return nil, nil, fmt.Errorf("%q: $NAME inside a word is not expanded by systemd; write ${NAME}", w)
			default:
				b.WriteByte(w[i])
			}
		}
		argv = append(argv, b.String())
	}
	return argv, used, nil
}

var wholeVar = regexp.MustCompile(`^\$([A-Za-z_][A-Za-z0-9_]*)$`)

// splitWords splits a command line at unquoted spaces; quotes group a word.
func splitWords(s string) ([]string, error) {
	var words []string
	var b strings.Builder
	in, quote := false, byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			b.WriteByte(c)
		case c == '"' || c == '\'':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				words = append(words, b.String())
				b.Reset()
				in = false
			}
		case c == '\\' && i+1 < len(s):
			i++
			b.WriteByte(s[i])
			in = true
		default:
			b.WriteByte(c)
			in = true
		}
	}
	if quote != 0 {
		return nil, errors.New("an unterminated quote")
	}
	if in {
		words = append(words, b.String())
	}
	return words, nil
}

// verifyUnit runs systemd-analyze verify on the unit where systemd-analyze
// is installed, the binary path pointed at one that exists (verify checks
// it): systemd's own reading of every key.
func verifyUnit(t *testing.T, file string) {
	t.Helper()
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze is not installed: systemd's own check of the unit is left out")
		return
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	copyFile := filepath.Join(t.TempDir(), filepath.Base(file))
	if err := os.WriteFile(copyFile, bytes.ReplaceAll(b, []byte(binary), []byte(self)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", "--man=no", copyFile).CombinedOutput()
	var problems []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, filepath.Base(file)) {
			problems = append(problems, l)
		}
	}
	if err != nil || len(problems) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", filepath.Base(file), err, out)
	}
}

// sysusers reads the users a sysusers.d file creates.
func sysusers(t *testing.T, file string) map[string]bool {
	t.Helper()
	users := map[string]bool{}
	for _, f := range configLines(t, file) {
		if len(f) >= 2 && f[0] == "u" {
			users[f[1]] = true
		}
	}
	if len(users) == 0 {
		t.Fatalf("%s creates no user", file)
	}
	return users
}

// configLines are the fields of a tmpfiles.d or sysusers.d file's lines,
// comments and blank lines left out.
func configLines(t *testing.T, file string) [][]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && l[0] != '#' {
			out = append(out, strings.Fields(l))
		}
	}
	return out
}

// readPlist reads an XML property list whose top is a dict: strict about
// what launchd reads (a key before every value, no key twice, only plist
// elements), lenient about the prolog and comments.
func readPlist(t *testing.T, file string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte(`<?xml version="1.0" encoding="UTF-8"?>`)) {
		t.Errorf("%s does not start with the XML declaration", file)
	}
	dec := xml.NewDecoder(bytes.NewReader(b))
	dec.Strict = true
	root, err := nextElement(dec)
	if err != nil || root.Name.Local != "plist" {
		t.Fatalf("%s: want a <plist> root element: %v", file, err)
	}
	top, err := nextElement(dec)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	v, err := plistValue(dec, top)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	d, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s: the plist holds a %T, want a dict", file, v)
	}
	if el, err := nextElement(dec); err != io.EOF {
		t.Fatalf("%s: more than one value in <plist> (%v, %v)", file, el.Name.Local, err)
	}
	return d
}

// nextElement skips to the next start element; io.EOF at an end element or
// the document's end.
func nextElement(dec *xml.Decoder) (xml.StartElement, error) {
	for {
		tok, err := dec.Token()
		if err != nil {
			return xml.StartElement{}, err
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			return tok, nil
		case xml.EndElement:
			return xml.StartElement{}, io.EOF
		case xml.CharData:
			if len(bytes.TrimSpace(tok)) > 0 {
				return xml.StartElement{}, fmt.Errorf("text %q outside a value", tok)
			}
		}
	}
}

// plistValue reads the value whose start element is el.
func plistValue(dec *xml.Decoder, el xml.StartElement) (any, error) {
	text := func() (string, error) {
		var s string
		err := dec.DecodeElement(&s, &el)
		return s, err
	}
	switch el.Name.Local {
	case "string", "integer", "real", "date", "data":
		return text()
	case "true", "false":
		if err := dec.Skip(); err != nil {
			return nil, err
		}
		return el.Name.Local == "true", nil
	case "array":
		var out []any
		for {
			c, err := nextElement(dec)
			if err == io.EOF {
				return out, nil
			} else if err != nil {
				return nil, err
			}
			v, err := plistValue(dec, c)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
	case "dict":
		out := map[string]any{}
		for {
			k, err := nextElement(dec)
			if err == io.EOF {
				return out, nil
			} else if err != nil {
				return nil, err
			}
			if k.Name.Local != "key" {
				return nil, fmt.Errorf("<%s> in a dict where a <key> belongs", k.Name.Local)
			}
			var key string
			if err := dec.DecodeElement(&key, &k); err != nil {
				return nil, err
			}
			c, err := nextElement(dec)
			if err != nil {
				return nil, fmt.Errorf("the key %s has no value", key)
			}
			v, err := plistValue(dec, c)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", key, err)
			}
			if _, dup := out[key]; dup {
				return nil, fmt.Errorf("the key %s is given twice", key)
			}
			out[key] = v
		}
	}
	return nil, fmt.Errorf("<%s> is not a plist element", el.Name.Local)
}

// hasLoop reports whether an image map names the loop image.
func hasLoop(images []string) bool {
	for _, img := range images {
		if strings.HasSuffix(img, "/clawfarm/loop") {
			return true
		}
	}
	return false
}

func keys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
