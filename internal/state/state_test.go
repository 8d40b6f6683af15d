package state

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func open(t *testing.T) *Dir {
	t.Helper()
	d, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestLockKeepsASecondWriterOut(t *testing.T) {
	root := t.TempDir()
	d, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(root); !errors.Is(err, ErrLocked) {
		t.Fatalf("a second Open while the first holds the lock: %v, want ErrLocked", err)
	}
	d.Close()
	d2, err := Open(root)
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	d2.Close()
}

func TestMemory(t *testing.T) {
	d := open(t)
	if m, err := d.ReadMemory(); err != nil || m != "" {
		t.Fatalf("empty memory: %q %v", m, err)
	}
	if err := d.SaveMemory(t0, "Ana's passcode hint: birthday"); err != nil {
		t.Fatal(err)
	}
	if err := d.SaveMemory(t0, "Wi-Fi is in Settings, first screen"); err != nil {
		t.Fatal(err)
	}
	m, _ := d.ReadMemory()
	if m != "- (2026-11-29) Ana's passcode hint: birthday\n- (2026-11-29) Wi-Fi is in Settings, first screen\n" {
		t.Fatalf("memory.md = %q", m)
	}
	if err := d.UpdateMemory("first screen", "second screen"); err != nil {
		t.Fatal(err)
	}
	if m, _ = d.ReadMemory(); !strings.Contains(m, "Settings, second screen") {
		t.Fatalf("after update: %q", m)
	}
	if err := d.UpdateMemory("nowhere", "x"); err == nil || !strings.Contains(err.Error(), "not in memory.md") {
		t.Errorf("update of missing text: %v", err)
	}
	if err := d.UpdateMemory("2026-11-29", "x"); err == nil || !strings.Contains(err.Error(), "2 times") {
		t.Errorf("ambiguous update: %v", err)
	}
	if err := d.SaveMemory(t0, "  "); err == nil {
		t.Error("empty save accepted")
	}
	b, _ := os.ReadFile(filepath.Join(d.Root(), "memory.md"))
	if string(b) != m {
		t.Error("memory.md on disk differs from ReadMemory")
	}
}

func TestLogs(t *testing.T) {
	d := open(t)
	for i, e := range []string{"opened Messages", "sent Ana the question\n## not a header", "set a timer"} {
		if err := d.AppendLog(t0.Add(time.Duration(i)*13*time.Hour), e); err != nil {
			t.Fatal(err)
		}
	}
	files, _ := filepath.Glob(filepath.Join(d.Root(), "logs", "*.md"))
	if len(files) != 2 { // 12:00 on the 29th; 01:00 and 14:00 on the 30th
		t.Fatalf("daily files %v", files)
	}
	got, err := d.ReadLogs(2)
	if err != nil || len(got) != 2 || !strings.HasPrefix(got[0].Text, "sent Ana") || got[1].Text != "set a timer" {
		t.Fatalf("newest 2: %+v %v", got, err)
	}
	if !got[1].Time.Equal(t0.Add(26 * time.Hour)) {
		t.Errorf("time %v", got[1].Time)
	}
	all, _ := d.ReadLogs(0)
	if len(all) != 3 || all[0].Text != "opened Messages" {
		t.Fatalf("all: %+v", all)
	}
}

func TestCron(t *testing.T) {
	c, err := ParseCron("30 14 2 12 *")
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := c.Next(t0); !ok || !n.Equal(time.Date(2026, 12, 2, 14, 30, 0, 0, time.UTC)) {
		t.Errorf("next %v", n)
	}
	c, _ = ParseCron("*/20 9-10 * * 1-5")
	if c.MinGap() != 20*time.Minute {
		t.Errorf("gap %s", c.MinGap())
	}
	// 2026-11-29 is a Sunday: the next weekday 9:00 is Monday the 30th.
	if n, _ := c.Next(t0); !n.Equal(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)) {
		t.Errorf("next weekday %v", n)
	}
	c, _ = ParseCron("0 0,23 * * *")
	if c.MinGap() != time.Hour {
		t.Errorf("wrap gap %s", c.MinGap())
	}
	for _, bad := range []string{"* * * *", "60 * * * *", "a * * * *", "*/0 * * * *", "5-1 * * * *", "0 0 * JAN *"} {
		if _, err := ParseCron(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestJobs(t *testing.T) {
	d := open(t)
	j, err := d.CreateJob(t0, NewJob{ID: "read-ana-reply", Schedule: "20 12 29 11 *", Description: "read Ana's answer", Context: "asked about dinner"})
	if err != nil {
		t.Fatal(err)
	}
	if j.Kind != KindOneTime || j.Status != JobActive || !j.NextRun.Equal(t0.Add(20*time.Minute)) {
		t.Fatalf("job %+v", j)
	}
	if _, err := d.CreateJob(t0, NewJob{ID: "read-ana-reply", Schedule: "20 13 29 11 *", Description: "again"}); err == nil {
		t.Error("a second active job with the same id was accepted")
	}
	if _, err := d.CreateJob(t0, NewJob{ID: "water", Kind: KindPeriodic, Schedule: "*/15 * * * *", Description: "water"}); err == nil || !strings.Contains(err.Error(), "30m0s apart") {
		t.Errorf("a 15-minute periodic job: %v", err)
	}
	if _, err := d.CreateJob(t0, NewJob{ID: "water", Kind: KindPeriodic, Schedule: "0,30 9 * * *", Description: "water the plants"}); err != nil {
		t.Errorf("a 30-minute periodic job: %v", err)
	}
	if _, err := d.CreateJob(t0, NewJob{ID: "x", Schedule: "0 9 * * *", Description: "one-time but daily"}); err == nil {
		t.Error("a one-time job with a repeating schedule was accepted")
	}
	if _, err := d.CreateJob(t0, NewJob{ID: "Bad ID", Schedule: "0 9 1 1 *", Description: "d"}); err == nil {
		t.Error("a bad id was accepted")
	}
	list, _ := d.ListJobs("active")
	if len(list) != 2 || list[0].ID != "read-ana-reply" || list[1].ID != "water" {
		t.Fatalf("active %+v", list)
	}
	if _, err := d.FinishJob(t0, "water", JobCancel, "no plants"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.FinishJob(t0, "water", JobDone, ""); err == nil {
		t.Error("finishing a finished job")
	}
	if g, _ := d.GetJob("water"); g.Status != JobCancel || g.Recap != "no plants" {
		t.Errorf("get %+v", g)
	}
	if list, _ = d.ListJobs("active"); len(list) != 1 {
		t.Errorf("active after finish %+v", list)
	}
	// The file survives a reopen.
	root := d.Root()
	d.Close()
	d2, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if all, _ := d2.ListJobs(""); len(all) != 2 {
		t.Errorf("after reopen %+v", all)
	}
}

func TestSkills(t *testing.T) {
	root := t.TempDir()
	write := func(p, s string) {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "state", "skills", "order-coffee", "SKILL.md"), "---\nname: order-coffee\ndescription: Order beans from the shop app\n---\n1. Open Shop\n2. Search beans\n")
	write(filepath.Join(root, "state", "skills", "order-coffee", "refs", "sizes.md"), "250 g or 1 kg")
	write(filepath.Join(root, "cm", "SKILL.md"), "---\nname: wifi\ndescription: \"Toggle Wi-Fi\"\n---\nSettings → Wi-Fi\n")
	write(filepath.Join(root, "broken", "x", "SKILL.md"), "no front matter")
	skills, err := LoadSkills(filepath.Join(root, "state", "skills"), filepath.Join(root, "cm"))
	if err != nil || len(skills) != 2 {
		t.Fatalf("skills %+v %v", skills, err)
	}
	if skills[0].Name != "order-coffee" || skills[0].Body != "1. Open Shop\n2. Search beans" || skills[1].Description != "Toggle Wi-Fi" {
		t.Fatalf("skills %+v", skills)
	}
	if ref, err := skills[0].Reference("refs/sizes.md"); err != nil || ref != "250 g or 1 kg" {
		t.Errorf("reference %q %v", ref, err)
	}
	if _, err := skills[0].Reference("../../../cm/SKILL.md"); err == nil {
		t.Error("a reference outside the skill's folder was read")
	}
	if _, err := LoadSkills(filepath.Join(root, "broken")); err == nil || !strings.Contains(err.Error(), "front matter") {
		t.Errorf("broken skill: %v", err)
	}
}

func TestWriteFileAtomic(t *testing.T) {
	p := filepath.Join(t.TempDir(), "snap.json")
	for _, s := range []string{"one", "two"} {
		if err := WriteFileAtomic(p, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := os.ReadFile(p)
	left, _ := filepath.Glob(p + "*")
	tmp, _ := filepath.Glob(filepath.Join(filepath.Dir(p), ".snap.json.tmp-*"))
	if string(b) != "two" || len(left) != 1 || len(tmp) != 0 {
		t.Fatalf("content %q, files %v, temp files %v", b, left, tmp)
	}
}
