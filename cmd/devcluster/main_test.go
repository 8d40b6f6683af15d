package main

import "testing"

func TestRunRejectsBadCommandsAndReportsNoCluster(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want int
	}{
		{nil, 2},
		{[]string{"--rigs", "3"}, 2},
		{[]string{"start"}, 2},
		{[]string{"up", "extra", "--dir", dir}, 2},
		{[]string{"up", "--rigs", "0", "--manager", "docker", "--dir", dir, "--build=false"}, 1},
		{[]string{"demo", "--manager", "none", "--dir", dir, "--build=false"}, 2}, // no operator to run it
		{[]string{"status", "--dir", dir}, 1},                                     // nothing runs there
		{[]string{"down", "--dir", dir}, 0},                                       // stopping nothing is fine
	} {
		if got := run(tc.args); got != tc.want {
			t.Errorf("devcluster %v: exit %d, want %d", tc.args, got, tc.want)
		}
	}
}

func TestDemoRefusesAHalfConfiguredProvider(t *testing.T) {
	t.Setenv("MODEL_BASE_URL", "https://api.example/v1")
	t.Setenv("MODEL_NAME", "")
	t.Setenv("MODEL_API_KEY", "")
	if got := run([]string{"demo", "--dir", t.TempDir()}); got != 2 {
		t.Fatalf("demo with only MODEL_BASE_URL: exit %d, want 2", got)
	}
}
