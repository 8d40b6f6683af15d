package progress

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/clawfarm/clawfarm/internal/contract"
)

func TestPatcherThrottlesAndFlushes(t *testing.T) {
	var mu sync.Mutex
	var patches []map[string]map[string]contract.Progress
	var times []time.Time
	p := New(func(_ context.Context, b []byte) error {
		var v map[string]map[string]contract.Progress
		if err := json.Unmarshal(b, &v); err != nil {
			t.Errorf("patch is not JSON: %s", b)
		}
		mu.Lock()
		patches = append(patches, v)
		times = append(times, time.Now())
		mu.Unlock()
		return nil
	}, 100*time.Millisecond, nil)
	start := time.Now()
	for i := 1; i <= 50; i++ {
		p.Report(contract.Progress{Attempt: 1, Turn: i, LastNote: "n"})
		time.Sleep(5 * time.Millisecond)
	}
	p.Close(context.Background())
	elapsed := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	if max := int(elapsed/(100*time.Millisecond)) + 2; len(patches) > max || len(patches) < 2 {
		t.Errorf("%d patches in %s", len(patches), elapsed)
	}
	for i := 1; i < len(times); i++ {
		if gap := times[i].Sub(times[i-1]); gap < 90*time.Millisecond {
			t.Errorf("patches %d and %d only %s apart", i-1, i, gap)
		}
	}
	if last := patches[len(patches)-1]["status"]["progress"]; last.Turn != 50 {
		t.Errorf("the last patch carries turn %d, want the final 50", last.Turn)
	}
}
