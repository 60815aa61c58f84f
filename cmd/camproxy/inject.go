package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/camproxy/camproxy/inject"
)

const injectUsage = `Usage: camproxy inject serve --listen ADDR [--tls-cert FILE --tls-key FILE] [flags]

Serves the Kubernetes sidecar injector (a mutating admission webhook) over TLS:
POST /mutate for pods annotated camproxy.io/inject: "true", POST /mutate/namespace
for pods of namespaces labelled camproxy.io/inject=enabled, GET /healthz, /readyz.
Without --tls-cert/--tls-key it makes a self-signed pair and publishes its
certificate into the caBundle of --webhook-config (in a cluster).

Flags:`

// defaultImage is the sidecar image of this build.
func defaultImage() string {
	tag := version
	if tag == "" || tag == "dev" {
		tag = "latest"
	}
	return "ghcr.io/camproxy/camproxy:" + tag
}

func injectCmd(ctx context.Context, args []string, stderr io.Writer, getenv func(string) (string, bool)) error {
	if len(args) == 0 || args[0] != "serve" {
		fmt.Fprintln(stderr, injectUsage)
		if len(args) == 0 {
			return usagef("inject: no subcommand given; want inject serve")
		}
		return usagef("inject: unknown subcommand %q; want inject serve", args[0])
	}
	f, err := parseInjectFlags(args[1:], stderr, getenv)
	if err != nil {
		return err
	}
	sc := f.server
	log, err := newLogger(stderr, f.logLevel, f.logFormat)
	if err != nil {
		return err
	}
	m, err := inject.NewMutator(f.opts)
	if err != nil {
		return usagef("inject serve: %v", err)
	}
	var api *inject.Client
	if sc.SelfSigned() && sc.WebhookConfig != "" {
		if api, err = inject.InCluster(getenv, inject.ServiceAccountDir); err != nil {
			log.Warn("the self-signed CA will not be published", "err", err)
			api = nil
		}
	}
	var srv *inject.Server
	if api != nil { // a nil *Client must not become a non-nil interface
		srv, err = inject.NewServer(sc, m, api, log, time.Now)
	} else {
		srv, err = inject.NewServer(sc, m, nil, log, time.Now)
	}
	if err != nil {
		if !sc.SelfSigned() { // the mounted pair does not load: bad config
			return usagef("inject serve: %v", err)
		}
		return fmt.Errorf("inject serve: %w", err)
	}
	return srv.Run(ctx)
}

// injectFlags are the parsed flags of inject serve.
type injectFlags struct {
	server              inject.ServerConfig
	opts                inject.Options
	logLevel, logFormat string
}

// parseInjectFlags reads the flags of inject serve; any problem is bad usage.
func parseInjectFlags(args []string, stderr io.Writer, getenv func(string) (string, bool)) (injectFlags, error) {
	env := func(k, def string) string {
		if v, ok := getenv(k); ok && v != "" {
			return v
		}
		return def
	}
	sc := inject.DefaultServerConfig()
	o := inject.DefaultOptions(env("CAMPROXY_SIDECAR_IMAGE", defaultImage()))
	fs := flag.NewFlagSet("inject serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, injectUsage); fs.PrintDefaults() }
	fs.StringVar(&sc.Listen, "listen", sc.Listen, "TLS listen address, host:port")
	fs.StringVar(&sc.CertFile, "tls-cert", "", "certificate file (PEM), e.g. from a cert-manager Secret; with --tls-key")
	fs.StringVar(&sc.KeyFile, "tls-key", "", "private key file (PEM); with --tls-cert")
	fs.StringVar(&sc.WebhookConfig, "webhook-config", sc.WebhookConfig, `MutatingWebhookConfiguration that gets the self-signed CA ("" = none)`)
	fs.StringVar(&sc.Service, "service", sc.Service, "the webhook's Service name (named by the self-signed certificate)")
	fs.StringVar(&sc.Namespace, "namespace", "", "the webhook's namespace (default $POD_NAMESPACE, else the service account's)")
	fs.DurationVar(&sc.CertValidity, "cert-validity", sc.CertValidity, "lifetime of the self-signed certificate")
	fs.StringVar(&o.Image, "image", o.Image, "sidecar image (default $CAMPROXY_SIDECAR_IMAGE, else this version's)")
	pull := fs.String("image-pull-policy", "", "sidecar imagePullPolicy: Always, IfNotPresent or Never (default: the cluster's)")
	fs.StringVar(&o.ConfigMap, "config-map", o.ConfigMap, "ConfigMap of the sidecar's config.yaml when a pod names none with camproxy.io/config")
	arms := fs.String("arms", "", "comma-separated arm names of the sidecar config's experiment; camproxy.io/arm can pin these")
	fs.StringVar(&o.CPURequest, "cpu-request", o.CPURequest, `sidecar CPU request ("" = none)`)
	fs.StringVar(&o.MemoryRequest, "memory-request", o.MemoryRequest, `sidecar memory request ("" = none)`)
	fs.StringVar(&o.CPULimit, "cpu-limit", o.CPULimit, `sidecar CPU limit ("" = none)`)
	fs.StringVar(&o.MemoryLimit, "memory-limit", o.MemoryLimit, `sidecar memory limit ("" = none)`)
	fs.StringVar(&o.SelfLabel, "self-label", o.SelfLabel, "key=value label of the injector's own pods, never injected")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "json", "json or text")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return injectFlags{}, usagef("inject serve: help requested")
		}
		return injectFlags{}, usagef("inject serve: %v", err)
	}
	if fs.NArg() > 0 {
		return injectFlags{}, usagef("inject serve: unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["listen"] {
		return injectFlags{}, usagef("inject serve: --listen is required")
	}
	o.ImagePullPolicy = corev1.PullPolicy(*pull)
	if *arms != "" {
		for _, a := range strings.Split(*arms, ",") {
			o.Arms = append(o.Arms, strings.TrimSpace(a))
		}
	}
	if sc.Namespace == "" {
		sc.Namespace = env("POD_NAMESPACE", "")
	}
	if sc.Namespace == "" {
		if b, err := os.ReadFile(filepath.Join(inject.ServiceAccountDir, "namespace")); err == nil {
			sc.Namespace = strings.TrimSpace(string(b))
		}
	}
	if sc.Namespace == "" && sc.SelfSigned() {
		sc.Namespace = "default"
	}
	if err := errors.Join(sc.Validate(), o.Validate()); err != nil {
		return injectFlags{}, usagef("inject serve: %v", err)
	}
	return injectFlags{server: sc, opts: o, logLevel: *logLevel, logFormat: *logFormat}, nil
}
