package trainer

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// rolloutBarrier is camproxy's rollout API for reward.py: every rollout waits
// until want of them are in flight at once, then scores 1; rollouts that never
// meet (run one after another) give up and answer 504, which reward.py scores 0.
type rolloutBarrier struct {
	want   int
	mu     sync.Mutex
	n      int
	all    chan struct{}
	bodies []string
}

func (b *rolloutBarrier) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	b.mu.Lock()
	b.bodies = append(b.bodies, string(body))
	b.n++
	if b.n == b.want {
		close(b.all)
	}
	b.mu.Unlock()
	select {
	case <-b.all:
		w.Write([]byte(`{"episode_id":"ro_1","reward":1,"success":true}`))
	case <-time.After(20 * time.Second): // not a measurement: the way out of a serial caller
		http.Error(w, `{"error":{"message":"the batch's rollouts did not run at once"}}`, http.StatusGatewayTimeout)
	}
}

// TestRewardWiringPerVerl runs grpo.sh against a stand-in veRL
// (testdata/verlstub) that loads reward.py and calls it the way veRL 0.6.1 and
// 0.7.0 each do: the wiring grpo.sh picks by the installed version scores a batch
// on both, its rollouts concurrently, and a response with no context gets
// --empty-reward without a rollout. Forcing the other version's wiring fails the
// way the real veRL fails.
func TestRewardWiringPerVerl(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not installed")
	}
	stub, _ := filepath.Abs("testdata/verlstub")
	items := []map[string]any{
		{"data_source": "camproxy", "solution_str": "<think>plan</think>Check the fare.", "ground_truth": "t1", "extra_info": map[string]any{"task": "rebook"}},
		{"data_source": "camproxy", "solution_str": "Ask for the id.", "ground_truth": "t2", "extra_info": map[string]any{"task": "refund"}},
		{"data_source": "camproxy", "solution_str": "<think>went on and on and was cut off", "ground_truth": "t3", "extra_info": map[string]any{"task": "x"}},
		{"data_source": "camproxy", "solution_str": "</think>Say no.", "ground_truth": "t4", "extra_info": map[string]any{"task": "y"}},
	}
	batch, _ := json.Marshal(items)
	for _, c := range []struct {
		version, force string
		mode, err      string
	}{
		{"0.6.1", "", "batch", ""},
		{"0.7.0.dev", "", "loop", ""},
		{"0.7.0", "", "loop", ""},
		{"0.6.1", "loop", "", "is a coroutine, not a number"}, // the old default on old veRL
		{"0.7.0.dev", "batch", "batch", ""},                   // forced: veRL's legacy managers, with a warning
	} {
		t.Run(c.version+"/"+c.force, func(t *testing.T) {
			b := &rolloutBarrier{want: 3, all: make(chan struct{})}
			srv := httptest.NewServer(b)
			defer srv.Close()
			o := DefaultGRPOOptions()
			o.Out, o.Prompter, o.Model, o.RolloutURL, o.EmptyReward = t.TempDir(), fixedPrompt{"s"}, checkpointDir(t), srv.URL, -1
			o.ChatTemplate = ChatTemplateKwargs{"enable_thinking": false}
			if _, err := WriteGRPO(grpoTasks(8), o); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("bash", filepath.Join(o.Out, "grpo.sh"))
			cmd.Dir = t.TempDir() // grpo.sh finds its files from anywhere
			cmd.Env = append(os.Environ(), "PYTHONPATH="+stub, "VERL_STUB_VERSION="+c.version, "VERL_STUB_BATCH="+string(batch),
				"CAMPROXY_REWARD_MODE="+c.force, "CAMPROXY_ROLLOUT_URL="+srv.URL)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if c.err != "" {
				if err == nil || !strings.Contains(stderr.String(), c.err) {
					t.Fatalf("want a failure with %q: %v\n%s", c.err, err, stderr.String())
				}
				return
			}
			if err != nil {
				t.Fatalf("grpo.sh: %v\n%s", err, stderr.String())
			}
			if !strings.Contains(stderr.String(), "veRL "+c.version+": reward mode "+c.mode) {
				t.Errorf("stderr:\n%s", stderr.String())
			}
			if c.force != "" && !strings.Contains(stderr.String(), "warning: reward mode "+c.force+" forced") {
				t.Errorf("no warning for a forced mode:\n%s", stderr.String())
			}
			res := gjson.ParseBytes(out)
			if got := res.Get("rewards").Raw; got != "[1.0, 1.0, -1.0, 1.0]" {
				t.Fatalf("rewards %s, want three rollouts at once and the empty context at --empty-reward\n%s", got, stderr.String())
			}
			if res.Get("apply_chat_template_kwargs").String() != "{enable_thinking:false}" {
				t.Errorf("apply_chat_template_kwargs %s", res.Get("apply_chat_template_kwargs"))
			}
			for _, body := range b.bodies {
				j := gjson.Parse(body)
				if j.Get("context").String() == "" || j.Get("timeout_s").Float() != 600 || j.Get("queue_timeout_s").Float() != 3600 {
					t.Errorf("rollout body %s", body)
				}
			}
		})
	}
}
