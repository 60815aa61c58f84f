package inject

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ServerConfig is how the webhook is served.
type ServerConfig struct {
	Listen string // host:port of the TLS listener
	// CertFile and KeyFile serve a mounted pair (cert-manager's Secret), reloaded
	// when it changes. Both empty: a self-signed pair is made at start and its
	// certificate published into WebhookConfig's caBundle.
	CertFile, KeyFile string
	// WebhookConfig is the MutatingWebhookConfiguration whose webhooks calling
	// Service in Namespace get the self-signed CA; "" = publish nowhere.
	WebhookConfig string
	Service       string
	Namespace     string
	CertValidity  time.Duration // of the self-signed pair
	Recheck       time.Duration // how often the published CA is checked (and restored), and mounted files re-read
	ShutdownGrace time.Duration
}

// DefaultServerConfig returns the defaults.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{
		Listen:        ":8443",
		WebhookConfig: "camproxy-injector",
		Service:       "camproxy-injector",
		CertValidity:  365 * 24 * time.Hour,
		Recheck:       time.Minute,
		ShutdownGrace: 10 * time.Second,
	}
}

// DefaultNamespace fills an unset Namespace: $POD_NAMESPACE, else the namespace of
// the pod's service account (under saDir, ServiceAccountDir in a pod), else
// "default" when the server makes its own pair (its certificate names the
// Service's namespace).
func (c *ServerConfig) DefaultNamespace(getenv func(string) (string, bool), saDir string) {
	if c.Namespace == "" {
		c.Namespace, _ = getenv("POD_NAMESPACE")
	}
	if c.Namespace == "" {
		if b, err := os.ReadFile(filepath.Join(saDir, "namespace")); err == nil {
			c.Namespace = strings.TrimSpace(string(b))
		}
	}
	if c.Namespace == "" && c.SelfSigned() {
		c.Namespace = "default"
	}
}

// SelfSigned reports whether the server makes its own pair.
func (c ServerConfig) SelfSigned() bool { return c.CertFile == "" && c.KeyFile == "" }

// Validate reports every problem, each naming its field.
func (c ServerConfig) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("listen: %q: %w", c.Listen, err))
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		errs = append(errs, errors.New("tls-cert and tls-key: give both or neither"))
	}
	if c.SelfSigned() {
		for _, f := range []struct{ name, v string }{{"service", c.Service}, {"namespace", c.Namespace}} {
			for _, msg := range validation.IsDNS1123Label(f.v) {
				errs = append(errs, fmt.Errorf("%s: %q: %s (the self-signed certificate names the Service)", f.name, f.v, msg))
			}
		}
		if c.CertValidity <= 0 {
			errs = append(errs, errors.New("cert validity: must be > 0"))
		}
	}
	if c.WebhookConfig != "" {
		for _, msg := range validation.IsDNS1123Subdomain(c.WebhookConfig) {
			errs = append(errs, fmt.Errorf("webhook config: %q: %s", c.WebhookConfig, msg))
		}
	}
	if c.Recheck <= 0 {
		errs = append(errs, errors.New("recheck: must be > 0"))
	}
	return errors.Join(errs...)
}

// Server is the injector process: the webhook over TLS, and the self-signed CA
// kept published.
type Server struct {
	cfg     ServerConfig
	handler http.Handler
	tls     *tls.Config
	api     webhookConfigs // nil: the CA is published nowhere
	caPEM   []byte         // the self-signed certificate; nil with mounted files
	log     *slog.Logger
	now     func() time.Time
	ready   atomic.Bool
}

// NewServer builds the server; api (a *Client) may be nil, and then a self-signed
// CA is not published (the log says so). now is the clock.
func NewServer(cfg ServerConfig, m *Mutator, api webhookConfigs, log *slog.Logger, now func() time.Time) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: log, now: now}
	s.tls = &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.SelfSigned() {
		certPEM, keyPEM, err := SelfSigned(ServiceDNSNames(cfg.Service, cfg.Namespace), now(), cfg.CertValidity)
		if err != nil {
			return nil, err
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("self-signed pair: %w", err)
		}
		s.tls.Certificates = []tls.Certificate{pair}
		s.caPEM = certPEM
		if api != nil && cfg.WebhookConfig != "" {
			s.api = api
		}
	} else {
		files, err := newCertFiles(cfg.CertFile, cfg.KeyFile, cfg.Recheck, now)
		if err != nil {
			return nil, err
		}
		s.tls.GetCertificate = files.GetCertificate
	}
	s.ready.Store(s.api == nil)
	s.handler = NewHandler(m, log, s.readiness)
	return s, nil
}

// CA is the self-signed certificate (PEM), nil when the pair is mounted.
func (s *Server) CA() []byte { return s.caPEM }

func (s *Server) readiness() error {
	if !s.ready.Load() {
		return errors.New("the CA is not yet published to the MutatingWebhookConfiguration " + s.cfg.WebhookConfig)
	}
	return nil
}

// Run listens on cfg.Listen and serves until ctx is done.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.cfg.Listen, err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx is done, then shuts down within ShutdownGrace.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.handler,
		TLSConfig:         s.tls,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       90 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug), // TLS handshake noise from probes
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	pctx, stopPublish := context.WithCancel(ctx)
	defer stopPublish()
	if s.api != nil {
		go s.keepPublished(pctx)
	} else if s.cfg.SelfSigned() {
		s.log.Warn("self-signed certificate not published: no Kubernetes API or no --webhook-config; the apiserver will not trust this webhook")
	}
	s.log.Info("camproxy injector serving", "listen", ln.Addr().String(), "self_signed", s.cfg.SelfSigned(),
		"webhook_config", s.cfg.WebhookConfig, "paths", []string{PathPod, PathNamespace})
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownGrace)
	defer cancel()
	s.log.Info("camproxy injector shutting down")
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// keepPublished publishes the CA, retrying with backoff until it is in, then checks
// every Recheck that it still is (a re-applied manifest or a recreated object drops it).
func (s *Server) keepPublished(ctx context.Context) {
	backoff := time.Second
	for {
		changed, err := PublishCA(ctx, s.api, s.cfg.WebhookConfig, s.cfg.Service, s.cfg.Namespace, s.caPEM, s.now())
		wait := s.cfg.Recheck
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			s.log.Error("publish the webhook CA; retrying", "webhook_config", s.cfg.WebhookConfig, "err", err, "in", backoff)
			wait, backoff = backoff, min(2*backoff, 30*time.Second)
		default:
			if changed || !s.ready.Load() {
				s.log.Info("webhook CA published", "webhook_config", s.cfg.WebhookConfig, "changed", changed)
			}
			s.ready.Store(true)
			backoff = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}
