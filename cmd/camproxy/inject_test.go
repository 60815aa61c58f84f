package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/cli/values"
	"helm.sh/helm/v3/pkg/getter"
	"helm.sh/helm/v3/pkg/releaseutil"

	"github.com/camproxy/camproxy/inject"
	cobracli "github.com/camproxy/camproxy/internal/cli"
	"github.com/camproxy/camproxy/internal/testkit"
)

func noEnv(string) (string, bool) { return "", false }

func TestInjectUsage(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"no subcommand", []string{"inject"}, []string{"inject: want a command: serve"}},
		{"unknown subcommand", []string{"inject", "run"}, []string{`unknown command "run": want serve`}},
		{"no listen", []string{"inject", "serve"}, []string{"--listen is required"}},
		{"bad listen", []string{"inject", "serve", "--listen", "8443"}, []string{"listen"}},
		{"half a pair", []string{"inject", "serve", "--listen", ":8443", "--tls-cert", "a.crt"}, []string{"give both or neither"}},
		{"missing pair", []string{"inject", "serve", "--listen", "127.0.0.1:0", "--tls-cert", filepath.Join(dir, "no.crt"), "--tls-key", filepath.Join(dir, "no.key")}, []string{"no.crt"}},
		{"bad flag", []string{"inject", "serve", "--listen", ":8443", "--nope"}, []string{"nope"}},
		{"argument", []string{"inject", "serve", "--listen", ":8443", "extra"}, []string{`unexpected argument "extra"`}},
		{"every bad option named", []string{"inject", "serve", "--listen", ":8443", "--image=", "--arms", "cam,a b",
			"--memory-limit", "lots", "--image-pull-policy", "Sometimes", "--config-map", "Not_A_Name"},
			[]string{"image:", `"a b"`, "memory limit", `--image-pull-policy "Sometimes": want Always, IfNotPresent or Never`, "config map"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := run(context.Background(), c.args, &out, &errb, noEnv)
			if code := cobracli.ExitCode(err, &errb); code != 2 {
				t.Fatalf("exit %d, want 2 (err %v)", code, err)
			}
			for _, w := range c.want {
				if !strings.Contains(errb.String(), w) {
					t.Errorf("stderr does not name %q:\n%s", w, errb.String())
				}
			}
		})
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"inject", "serve", "--help"}, &out, &out, noEnv); err != nil || !strings.Contains(out.String(), "camproxy inject serve --listen ADDR") {
		t.Errorf("usage does not list inject serve: %v\n%s", err, out.String())
	}
}

func TestInjectFlags(t *testing.T) {
	cases := []struct {
		name      string
		args      []string
		env       map[string]string
		image, ns string
		arms      []string
	}{
		{"defaults", nil, nil, "ghcr.io/camproxy/camproxy:latest", "default", nil},
		{"from the environment", nil, map[string]string{"CAMPROXY_SIDECAR_IMAGE": "registry.local/camproxy:v2", "POD_NAMESPACE": "camproxy"},
			"registry.local/camproxy:v2", "camproxy", nil},
		{"flags win", []string{"--image", "registry.local/camproxy:v3", "--namespace", "platform", "--arms", "baseline, cam"},
			map[string]string{"CAMPROXY_SIDECAR_IMAGE": "registry.local/camproxy:v2", "POD_NAMESPACE": "camproxy"},
			"registry.local/camproxy:v3", "platform", []string{"baseline", "cam"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			getenv := func(k string) (string, bool) { v, ok := c.env[k]; return v, ok }
			f, err := parseInjectFlags(append([]string{"--listen", ":8443"}, c.args...), getenv)
			if err != nil {
				t.Fatal(err)
			}
			sc, o := f.server, f.opts
			if _, statErr := os.Stat(filepath.Join(inject.ServiceAccountDir, "namespace")); statErr == nil && c.ns == "default" {
				t.Skip("running in a pod: the namespace comes from its service account")
			}
			if o.Image != c.image || sc.Namespace != c.ns || !slices.Equal(o.Arms, c.arms) {
				t.Errorf("image %s namespace %s arms %q", o.Image, sc.Namespace, o.Arms)
			}
		})
	}
}

// TestInjectDeployArgs: the injector's args in the Helm chart (its own certificate,
// cert-manager's, an experiments list) are accepted by this very flag parser.
func TestInjectDeployArgs(t *testing.T) {
	ch, err := loader.Load(filepath.Join("..", "..", "deploy", "helm", "camproxy"))
	if err != nil {
		t.Fatal(err)
	}
	// With config.experiments the injector knows no arms: --arms= is empty.
	for _, set := range [][]string{nil, {"injector.certManager.enabled=true"}, {"config.experiments[0].name=default"}} {
		vals, err := (&values.Options{Values: set}).MergeValues(getter.Providers{})
		if err != nil {
			t.Fatal(err)
		}
		inst := action.NewInstall(&action.Configuration{Log: t.Logf})
		inst.DryRun, inst.ClientOnly, inst.ReleaseName, inst.Namespace = true, true, "camproxy", "camproxy"
		inst.KubeVersion = &chartutil.KubeVersion{Version: "v1.29.0", Major: "1", Minor: "29"}
		rel, err := inst.Run(ch, vals)
		if err != nil {
			t.Fatalf("%v: %v", set, err)
		}
		var args []string
		for _, doc := range releaseutil.SplitManifests(rel.Manifest) {
			var d appsv1.Deployment
			if yaml.Unmarshal([]byte(doc), &d) == nil && d.Kind == "Deployment" && len(d.Spec.Template.Spec.Containers) > 0 &&
				slices.Equal(d.Spec.Template.Spec.Containers[0].Args[:min(2, len(d.Spec.Template.Spec.Containers[0].Args))], []string{"inject", "serve"}) {
				args = d.Spec.Template.Spec.Containers[0].Args
			}
		}
		if args == nil {
			t.Fatalf("%v: no Deployment runs camproxy inject serve", set)
		}
		env := map[string]string{"POD_NAMESPACE": "camproxy"}
		if _, err := parseInjectFlags(args[2:], func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
			t.Errorf("%v: %v: %v", set, args, err)
		}
	}
}

// parseInjectFlags is what inject serve makes of args, as it would start with.
func parseInjectFlags(args []string, getenv func(string) (string, bool)) (injectFlags, error) {
	var got injectFlags
	c := &cli{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, getenv: getenv}
	cmd := c.injectServeCmd(func(_ context.Context, f injectFlags) error { got = f; return nil })
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	return got, c.runner.Execute(context.Background(), cmd, args)
}

// startInjector runs the real binary with args and waits for it to serve.
func startInjector(t *testing.T, args string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	env := slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, "KUBERNETES_SERVICE_") })
	cmd.Env = append(env, "CAMPROXY_BE_MAIN=1", "CAMPROXY_ARGS="+args)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	serving := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "camproxy injector serving") {
				close(serving)
			}
		}
	}()
	select {
	case <-serving:
	case <-time.After(testkit.Patience(t)):
		_ = cmd.Process.Kill()
		t.Fatalf("the injector did not start:\n%s", logs.String())
	}
	return cmd, &logs
}

func stopInjector(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(testkit.Patience(t)):
		_ = cmd.Process.Kill()
		t.Fatal("the injector did not exit after SIGTERM")
	}
}

const plainReview = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-1",
"kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},
"namespace":"agents","operation":"CREATE","object":{"apiVersion":"v1","kind":"Pod",
"metadata":{"name":"a","annotations":{"camproxy.io/inject":"true"}},"spec":{"containers":[{"name":"agent","image":"python:3.12"}]}}}}`

func admit(t *testing.T, c *http.Client, url string) map[string]any {
	t.Helper()
	resp, err := c.Post(url, "application/json", strings.NewReader(plainReview))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a struct {
		Response map[string]any `json:"response"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %v", resp.StatusCode, err)
	}
	return a.Response
}

// TestInjectServe runs `camproxy inject serve` as a process: with a mounted pair the
// apiserver's view (trust the CA, check the Service's name) gets a patch whose
// sidecar image is --image; self-signed outside a cluster it still serves, and says
// the CA was not published. SIGTERM exits 0.
func TestInjectServe(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM, err := inject.SelfSigned(inject.ServiceDNSNames("camproxy-injector", "camproxy"), time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	_ = os.WriteFile(certFile, certPEM, 0o600)
	_ = os.WriteFile(keyFile, keyPEM, 0o600)

	t.Run("mounted pair", func(t *testing.T) {
		addr := freeAddr(t)
		cmd, _ := startInjector(t, "inject serve --listen "+addr+" --tls-cert "+certFile+" --tls-key "+keyFile+
			" --image registry.local/camproxy:v9 --log-format text")
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(certPEM)
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "camproxy-injector.camproxy.svc"}}}
		r := admit(t, c, "https://"+addr+inject.PathPod)
		patch, _ := r["patch"].(string)
		if r["allowed"] != true || r["patchType"] != "JSONPatch" || patch == "" {
			t.Fatalf("response %v", r)
		}
		ops, err := base64.StdEncoding.DecodeString(patch)
		if err != nil || !bytes.Contains(ops, []byte(`"image":"registry.local/camproxy:v9"`)) {
			t.Errorf("the patch does not add the --image sidecar: %v\n%s", err, ops)
		}
		stopInjector(t, cmd)
	})
	t.Run("self-signed outside a cluster", func(t *testing.T) {
		addr := freeAddr(t)
		cmd, logs := startInjector(t, "inject serve --listen "+addr+" --log-format text")
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		if r := admit(t, c, "https://"+addr+inject.PathPod); r["allowed"] != true || r["patch"] == nil {
			t.Fatalf("response %v", r)
		}
		stopInjector(t, cmd)
		if !strings.Contains(logs.String(), "not published") {
			t.Errorf("no warning that the CA was not published:\n%s", logs.String())
		}
	})
}
