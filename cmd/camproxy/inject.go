package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	"github.com/camproxy/camproxy/inject"
	cobracli "github.com/camproxy/camproxy/internal/cli"
)

func (c *cli) injectCmd() *cobra.Command {
	return c.runner.Group("inject", "The Kubernetes sidecar injector",
		"  camproxy inject serve --listen :8443 --arms baseline,cam",
		c.injectServeCmd(c.injectServe))
}

func (c *cli) injectServeCmd(run func(context.Context, injectFlags) error) *cobra.Command {
	env := func(k, def string) string {
		if v, ok := c.getenv(k); ok && v != "" {
			return v
		}
		return def
	}
	sc := inject.DefaultServerConfig()
	o := inject.DefaultOptions(env("CAMPROXY_SIDECAR_IMAGE", inject.DefaultImage(version)))
	var pull, arms string
	var logs cobracli.LogFlags
	cmd := &cobra.Command{
		Use:   "serve --listen ADDR [--tls-cert FILE --tls-key FILE]",
		Short: "Serve the sidecar injector (a mutating admission webhook)",
		Long: `Serve the Kubernetes sidecar injector, a mutating admission webhook, over TLS:
POST /mutate for pods annotated camproxy.io/inject: "true", POST /mutate/namespace
for pods of namespaces labelled camproxy.io/inject=enabled, GET /healthz, /readyz.
Without --tls-cert/--tls-key it makes a self-signed pair and publishes its
certificate into the caBundle of --webhook-config (in a cluster).`,
		Example: `  camproxy inject serve --listen :8443 --arms baseline,cam
  camproxy inject serve --listen :8443 --tls-cert /certs/tls.crt --tls-key /certs/tls.key --webhook-config ""`,
		Args: c.runner.Checks(func(p *cobracli.Problems, args []string) {
			p.NoArgs(args)
			o.ImagePullPolicy = corev1.PullPolicy(pull)
			o.Arms = nil
			if arms != "" {
				for _, a := range strings.Split(arms, ",") {
					o.Arms = append(o.Arms, strings.TrimSpace(a))
				}
			}
			sc.DefaultNamespace(c.getenv, inject.ServiceAccountDir)
			for _, err := range []error{sc.Validate(), o.Validate()} {
				if err != nil {
					p.Add("%v", err)
				}
			}
		}),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), injectFlags{server: sc, opts: o, logs: logs})
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&sc.Listen, "listen", sc.Listen, "TLS listen address, host:port")
	fs.StringVar(&sc.CertFile, "tls-cert", "", "certificate file (PEM), e.g. from a cert-manager Secret; with --tls-key")
	fs.StringVar(&sc.KeyFile, "tls-key", "", "private key file (PEM); with --tls-cert")
	fs.StringVar(&sc.WebhookConfig, "webhook-config", sc.WebhookConfig, `MutatingWebhookConfiguration that gets the self-signed CA ("" = none)`)
	fs.StringVar(&sc.Service, "service", sc.Service, "the webhook's Service name (named by the self-signed certificate)")
	fs.StringVar(&sc.Namespace, "namespace", "", "the webhook's namespace (default $POD_NAMESPACE, else the service account's)")
	fs.DurationVar(&sc.CertValidity, "cert-validity", sc.CertValidity, "lifetime of the self-signed certificate")
	fs.StringVar(&o.Image, "image", o.Image, "sidecar image ($CAMPROXY_SIDECAR_IMAGE overrides the default, this version's)")
	cobracli.ChoiceVar(fs, &pull, "image-pull-policy", "", "sidecar imagePullPolicy (default: the cluster's)", "Always", "IfNotPresent", "Never")
	fs.StringVar(&o.ConfigMap, "config-map", o.ConfigMap, "ConfigMap of the sidecar's config.yaml when a pod names none with camproxy.io/config")
	fs.StringVar(&arms, "arms", "", "comma-separated arm names of the sidecar config's experiment; camproxy.io/arm can pin these")
	fs.StringVar(&o.CPURequest, "cpu-request", o.CPURequest, `sidecar CPU request ("" = none)`)
	fs.StringVar(&o.MemoryRequest, "memory-request", o.MemoryRequest, `sidecar memory request ("" = none)`)
	fs.StringVar(&o.CPULimit, "cpu-limit", o.CPULimit, `sidecar CPU limit ("" = none)`)
	fs.StringVar(&o.MemoryLimit, "memory-limit", o.MemoryLimit, `sidecar memory limit ("" = none)`)
	fs.StringVar(&o.SelfLabel, "self-label", o.SelfLabel, "key=value label of the injector's own pods, never injected")
	logs.Define(fs)
	_ = cmd.MarkFlagRequired("listen")
	return cmd
}

func (c *cli) injectServe(ctx context.Context, f injectFlags) error {
	sc := f.server
	log := f.logs.Logger(c.stderr)
	m, err := inject.NewMutator(f.opts)
	if err != nil {
		return cobracli.Usagef("inject serve: %v", err)
	}
	var api *inject.Client
	if sc.SelfSigned() && sc.WebhookConfig != "" {
		if api, err = inject.InCluster(c.getenv, inject.ServiceAccountDir); err != nil {
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
			return cobracli.Usagef("inject serve: %v", err)
		}
		return fmt.Errorf("inject serve: %w", err)
	}
	return srv.Run(ctx)
}

// injectFlags are the parsed flags of inject serve.
type injectFlags struct {
	server inject.ServerConfig
	opts   inject.Options
	logs   cobracli.LogFlags
}
