package admin

import (
	"net/http"
	"net/http/pprof"

	"github.com/go-chi/chi/v5"
)

// mountPprof serves Go's profiler on r: the handlers net/http/pprof registers on
// the default mux, registered here instead (camproxy serves no default mux). They
// sit behind the router's guard like the rest of the API: a CPU profile and a heap
// dump reveal prompts in flight.
func mountPprof(r chi.Router) {
	r.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	r.HandleFunc("/debug/pprof/profile", pprof.Profile)
	r.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	r.HandleFunc("/debug/pprof/trace", pprof.Trace)
	// Index serves the listing and every named profile (heap, goroutine, allocs, …).
	r.HandleFunc("/debug/pprof/*", pprof.Index)
	r.Get("/debug/pprof", func(w http.ResponseWriter, req *http.Request) {
		http.Redirect(w, req, "/debug/pprof/", http.StatusMovedPermanently)
	})
}
