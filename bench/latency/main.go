// Command latency measures what camproxy adds to a call: the same 16 KB request, built
// from a real tau-bench conversation, is sent alternately straight to a fake upstream
// and through camproxy (CAM arm, warm cache), non-streaming and streaming, and the
// percentiles are printed side by side with their ratios. Both paths run in the same
// process and the same moment, so machine noise hits them alike.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/app"
	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/proxy"
)

func main() {
	n := flag.Int("n", 2000, "requests per path and mode")
	data := flag.String("data", "../shared/data/tau-bench/gpt-4o-airline.json", "tau-bench trajectories")
	size := flag.Int("size", 16<<10, "request body size to build from the conversation")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if err := run(*n, *data, *size); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// buildBody takes messages of the first trajectory until the body reaches size.
func buildBody(path string, size int) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s (the shared data set): %w", path, err)
	}
	traj := gjson.GetBytes(raw, "0.traj").Array()
	var msgs []json.RawMessage
	total := 0
	for _, m := range traj {
		if total >= size && m.Get("role").String() != "tool" {
			break
		}
		msgs = append(msgs, json.RawMessage(m.Raw))
		total += len(m.Raw)
	}
	return json.Marshal(map[string]any{"model": "gpt-4o", "messages": msgs, "temperature": 0})
}

func run(n int, dataPath string, size int) error {
	body, err := buildBody(dataPath, size)
	if err != nil {
		return err
	}
	up, cam := testkit.NewUpstream(), testkit.NewCAM()
	defer up.Close()
	defer cam.Close()
	up.Reply = func(gjson.Result) testkit.Reply {
		return testkit.Reply{Content: "I have checked the reservation and the flight is on time."}
	}
	cfg := config.Default()
	cfg.Server.Listen, cfg.Server.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Upstreams["openai"].BaseURL = up.URL
	ac := config.DefaultAugmenter()
	ac.Type, ac.BaseURL = "cam", cam.URL+"/v1"
	cfg.Augmenters = map[string]config.Augmenter{"cam": ac}
	cfg.Experiment.Arms = []config.Arm{{Name: "cam", Weight: 1, Augmenter: "cam"}}
	tmp, err := os.MkdirTemp("", "camproxy-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// Bedrock: camproxy re-signs with these, as it would with the pod's credentials.
	br := testkit.NewBedrock("AKIDBENCH", "bench-secret", "us-east-1")
	defer br.Close()
	br.ReplyFn = func(string, string, gjson.Result) testkit.BedrockReply {
		return testkit.BedrockReply{Content: "I have checked the reservation and the flight is on time."}
	}
	os.Setenv("AWS_ACCESS_KEY_ID", "AKIDBENCH")
	os.Setenv("AWS_SECRET_ACCESS_KEY", "bench-secret")
	os.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	cfg.Upstreams["bedrock"].Endpoint = br.URL
	cfg.Replay.Sinks = []string{"file://" + tmp + "/replay"}
	cfg.Replay.SpoolDir = tmp + "/spool"
	if err := cfg.Validate(); err != nil {
		return err
	}
	recording, err := startApp(cfg, nil)
	if err != nil {
		return err
	}
	defer recording.Shutdown(context.Background())
	silent, err := startApp(cfg, discard{})
	if err != nil {
		return err
	}
	defer silent.Shutdown(context.Background())

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}
	hosts := []string{up.URL, "http://" + recording.Addr(), "http://" + silent.Addr()}
	stream, err := withStream(body)
	if err != nil {
		return err
	}
	converse, err := converseBody(body)
	if err != nil {
		return err
	}
	chat := func(b []byte) func(int) *http.Request {
		return func(i int) *http.Request {
			r, _ := http.NewRequest(http.MethodPost, hosts[i]+"/v1/chat/completions", bytes.NewReader(b))
			r.Header.Set("Content-Type", "application/json")
			return r
		}
	}
	bedrockHosts := []string{br.URL, hosts[1], hosts[2]}
	converseStream := func(i int) *http.Request {
		r, _ := http.NewRequest(http.MethodPost, bedrockHosts[i]+"/model/us.anthropic.claude-3-5-sonnet-20241022-v2%3A0/converse-stream", bytes.NewReader(converse))
		r.Header.Set("Content-Type", "application/json")
		if i == 0 { // straight to Bedrock: the client signs, as an SDK would
			sum := sha256.Sum256(converse)
			creds := aws.Credentials{AccessKeyID: "AKIDBENCH", SecretAccessKey: "bench-secret"}
			_ = v4.NewSigner().SignHTTP(context.Background(), creds, r, hex.EncodeToString(sum[:]), "bedrock", "us-east-1", time.Now())
		}
		return r
	}
	for range 50 { // warm up connections and the context cache
		for i := range hosts {
			for _, mk := range []func(int) *http.Request{chat(body), converseStream} {
				if _, err := call(client, mk(i)); err != nil {
					return err
				}
			}
		}
	}
	fmt.Printf("camproxy added latency — %d requests per path, body %d bytes from a real tau-bench conversation, CAM arm on a warm cache\n", n, len(body))
	fmt.Printf("paths alternate request by request so that machine noise hits them alike\n\n")
	fmt.Printf("%-26s %9s %10s %9s %7s %11s %9s\n", "", "direct", "camproxy", "added", "ratio", "no-record", "recording")
	for _, mode := range []struct {
		name string
		req  func(int) *http.Request
	}{{"non-streaming total", chat(body)}, {"streaming first byte", chat(stream)}, {"bedrock stream 1st event", converseStream}} {
		lat := make([][]time.Duration, len(hosts))
		for range n {
			for i := range hosts {
				d, err := call(client, mode.req(i))
				if err != nil {
					return err
				}
				lat[i] = append(lat[i], d)
			}
		}
		for i := range lat {
			slices.Sort(lat[i])
		}
		for _, q := range []float64{0.50, 0.99} {
			dq, pq, sq := pct(lat[0], q), pct(lat[1], q), pct(lat[2], q)
			fmt.Printf("%-26s %9s %10s %9s %6.2fx %11s %9s\n", fmt.Sprintf("%s p%.0f", mode.name, q*100),
				us(dq), us(pq), us(pq-dq), float64(pq)/float64(dq), us(sq), us(pq-sq))
		}
	}
	fmt.Println("\ncamproxy records every call to a file sink; no-record is the same camproxy with recording off,")
	fmt.Println("and recording = camproxy - no-record: the latency that recording adds.")
	fmt.Printf("\nCAM calls during the run: %d (one per camproxy instance on a warm cache: expected 2)\n", cam.Calls())
	return nil
}

// discard is a recorder that drops every turn: the no-recording baseline.
type discard struct{}

func (discard) Record(*episode.Turn) {}

func startApp(cfg *config.Config, rec proxy.Recorder) (*app.App, error) {
	a, err := app.New(cfg, app.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Recorder: rec})
	if err != nil {
		return nil, err
	}
	return a, a.Start()
}

// converseBody turns the chat conversation into a Converse body of about the same
// size: the system prompt, then the texts with roles alternating from a user turn.
func converseBody(chat []byte) ([]byte, error) {
	var msgs []map[string]any
	var system string
	gjson.GetBytes(chat, "messages").ForEach(func(_, m gjson.Result) bool {
		role, text := m.Get("role").String(), m.Get("content").String()
		switch {
		case role == "system":
			system = text
			return true
		case role == "tool":
			role = "user"
		case role != "user" && role != "assistant":
			return true
		}
		if text == "" {
			text = m.Get("tool_calls").Raw
		}
		if len(msgs) == 0 && role != "user" {
			return true
		}
		if n := len(msgs); n > 0 && msgs[n-1]["role"] == role {
			blocks := msgs[n-1]["content"].([]map[string]any)
			msgs[n-1]["content"] = append(blocks, map[string]any{"text": text})
			return true
		}
		msgs = append(msgs, map[string]any{"role": role, "content": []map[string]any{{"text": text}}})
		return true
	})
	if n := len(msgs); n > 0 && msgs[n-1]["role"] == "assistant" {
		msgs = msgs[:n-1]
	}
	return json.Marshal(map[string]any{"system": []map[string]any{{"text": system}}, "messages": msgs,
		"inferenceConfig": map[string]any{"maxTokens": 512}})
}

func withStream(body []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	m["stream"] = json.RawMessage("true")
	return json.Marshal(m)
}

// call returns the time to the first body byte, then drains the body.
func call(c *http.Client, req *http.Request) (time.Duration, error) {
	url := req.URL.String()
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var one [1]byte
	if _, err := io.ReadFull(resp.Body, one[:]); err != nil {
		return 0, err
	}
	ttfb := time.Since(start)
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, err
	}
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("%s: status %d", url, resp.StatusCode)
	}
	return ttfb, nil
}

func pct(s []time.Duration, q float64) time.Duration {
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func us(d time.Duration) string { return fmt.Sprintf("%.0fµs", float64(d)/1e3) }
