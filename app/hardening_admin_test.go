package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
)

// TestHardeningAdminExposure (issue 18, 8): an admin plane bound where other hosts
// reach it, with no admin.token, is refused — by the config loader `camproxy serve`
// uses and by New — with an error that names both settings and the fixes, unless
// admin.loopback_only (a sidecar) or the admin.allow_unauthenticated opt-out, which
// is logged loudly at start. Nothing is bound: New alone decides.
func TestHardeningAdminExposure(t *testing.T) {
	const token = "s3cr3t-admin-token-0123456789"
	up, cam := testkit.NewUpstream(), testkit.NewCAM()
	t.Cleanup(up.Close)
	t.Cleanup(cam.Close)
	for _, c := range []struct {
		name, listen    string
		admin           config.Admin
		refused, warned bool
	}{
		{"every interface, no token", "0.0.0.0:9090", config.Admin{}, true, false},
		{"empty host, no token", ":9090", config.Admin{}, true, false},
		{"a pod IP, no token", "10.0.0.7:9090", config.Admin{}, true, false},
		{"v6 any, no token", "[::]:9090", config.Admin{}, true, false},
		{"every interface, a token", "0.0.0.0:9090", config.Admin{Token: token}, false, false},
		{"every interface, loopback_only", ":9090", config.Admin{LoopbackOnly: true}, false, false},
		{"every interface, opted out", "0.0.0.0:9090", config.Admin{AllowUnauthenticated: true}, false, true},
		{"loopback, no token", "127.0.0.1:9090", config.Admin{}, false, false},
		{"localhost, no token", "localhost:9090", config.Admin{}, false, false},
		{"v6 loopback, no token", "[::1]:9090", config.Admin{}, false, false},
		{"loopback, opted out", "127.0.0.1:9090", config.Admin{AllowUnauthenticated: true}, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			yml := fmt.Sprintf("server: {listen: \"127.0.0.1:8080\", admin_listen: %q}\nadmin: {token: %q, loopback_only: %v, allow_unauthenticated: %v}\n",
				c.listen, c.admin.Token, c.admin.LoopbackOnly, c.admin.AllowUnauthenticated)
			_, perr := config.Parse([]byte(yml), func(string) (string, bool) { return "", false })

			cfg := testConfig(up, cam)
			cfg.Server.AdminListen, cfg.Admin = c.listen, c.admin
			dir := t.TempDir()
			cfg.Replay.Sinks = []string{"file://" + dir + "/replay"}
			cfg.Replay.SpoolDir = dir + "/spool"
			var logs testkit.SyncBuffer
			a, nerr := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if a != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = a.Shutdown(ctx)
				cancel()
			}
			for what, err := range map[string]error{"config.Parse": perr, "New": nerr} {
				if (err != nil) != c.refused {
					t.Fatalf("%s: %v, want refused %v", what, err, c.refused)
				}
				if err == nil {
					continue
				}
				for _, want := range []string{"server.admin_listen", "admin.token", "CAMPROXY_ADMIN_TOKEN", "127.0.0.1", "admin.allow_unauthenticated", c.listen} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%s's refusal does not name %q: %v", what, want, err)
					}
				}
			}
			warned := strings.Contains(logs.String(), "level=WARN") && strings.Contains(logs.String(), "ADMIN API OPEN")
			if warned != c.warned {
				t.Errorf("warned %v, want %v: %s", warned, c.warned, logs.String())
			}
			switch {
			case c.name == "every interface, no token":
				faultRow(t, "admin", "admin_listen 0.0.0.0 without admin.token", "camproxy does not start", firstLine(nerr))
			case c.warned:
				faultRow(t, "admin", "admin_listen 0.0.0.0, allow_unauthenticated", "starts", "start-up WARN: "+firstLine(errors.New(logs.String()[strings.Index(logs.String(), "msg="):])))
			}
		})
	}
}

func firstLine(err error) string {
	if err == nil {
		return "no error"
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	if len(s) > 90 {
		s = s[:90] + "…"
	}
	return s
}
