package inject

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
)

// The webhook's paths. A MutatingWebhookConfiguration sends pods of namespaces
// labelled camproxy.io/inject=enabled to PathNamespace and every other pod to PathPod.
const (
	PathPod       = "/mutate"
	PathNamespace = "/mutate/namespace"
	PathHealth    = "/healthz"
	PathReady     = "/readyz"
)

// maxReview bounds an AdmissionReview body; the apiserver's own object limit is 3 MiB.
const maxReview = 8 << 20

// NewHandler serves the webhook: POST PathPod and PathNamespace, GET PathHealth,
// and GET PathReady, which answers 503 with ready's error until ready returns nil
// (nil ready = always ready).
func NewHandler(m *Mutator, log *slog.Logger, ready func() error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST "+PathPod, &review{m: m, mode: PodOptIn, log: log})
	mux.Handle("POST "+PathNamespace, &review{m: m, mode: NamespaceOptIn, log: log})
	mux.HandleFunc("GET "+PathHealth, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET "+PathReady, func(w http.ResponseWriter, _ *http.Request) {
		if ready != nil {
			if err := ready(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux
}

type review struct {
	m    *Mutator
	mode Mode
	log  *slog.Logger
}

func (h *review) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxReview))
	if err != nil {
		status := http.StatusBadRequest
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			status = http.StatusRequestEntityTooLarge
		}
		http.Error(w, "read AdmissionReview: "+err.Error(), status)
		return
	}
	req, err := parseReview(body)
	if err != nil {
		// Nothing to answer: the apiserver applies the failure policy (Ignore).
		h.log.Warn("bad admission request", "path", r.URL.Path, "err", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	res := Result{Reason: "not a pod creation"}
	if req.isPodCreate() {
		res = h.m.Mutate(req.object, h.mode)
	}
	out, err := req.respond(res)
	if err != nil {
		h.log.Error("encode admission response", "uid", req.uid, "err", err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	level := slog.LevelDebug
	if res.Patch != nil || len(res.Warnings) > 0 {
		level = slog.LevelInfo
	}
	h.log.Log(r.Context(), level, "admission", "uid", req.uid, "namespace", req.namespace, "name", req.name,
		"kind", req.kind.Kind, "operation", req.operation, "patched", res.Patch != nil, "reason", res.Reason)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}
