package proxy

import (
	"github.com/valyala/fasthttp"

	"github.com/camproxy/camproxy/protocol/registry"
)

// A protocol is its package under protocol/ and its entry in protocol/registry: the
// entry says which calls it takes, how its body is parsed, its error shape and
// stream framing, and which upstream (registry.Provider) its calls go to. The data
// plane only binds entries to the configured upstreams.

// fcCall is a request as registry.Call: a pointer-shaped value, so that passing it
// as the interface does not allocate.
type fcCall struct{ fc *fasthttp.RequestCtx }

func (c fcCall) Path() []byte              { return c.fc.Path() }
func (c fcCall) RawPath() []byte           { return c.fc.URI().PathOriginal() }
func (c fcCall) Header(name string) []byte { return c.fc.Request.Header.Peek(name) }
func (c fcCall) Query(name string) []byte  { return c.fc.QueryArgs().Peek(name) }

// route is a registry protocol bound to its configured upstream.
type route struct {
	*registry.Protocol
	up     *Upstream
	series *seriesList // its calls' metric series (stats.routeSeries); nil: none kept
}

// buildRoutes binds each protocol whose upstream is configured. A protocol without
// one has no route: its calls fall to the next that owns them (in the end the
// OpenAI-compatible upstream, which receives them untouched).
func buildRoutes(ups map[string]*Upstream) ([]route, []*registry.Protocol) {
	var rs []route
	var ps []*registry.Protocol
	for _, p := range registry.All {
		if up := ups[p.Provider.Name]; up != nil {
			rs = append(rs, route{Protocol: p, up: up, series: &seriesList{}})
			ps = append(ps, p)
		}
	}
	return rs, ps
}

// lookup matches a call to its route (registry.Match) and says whether the
// pipeline takes it.
func (s *Server) lookup(fc *fasthttp.RequestCtx) (rt *route, augmented bool) {
	i, augmented := registry.Match(s.protocols, fcCall{fc})
	return &s.routes[i], augmented
}

// styleFor picks the error shape of a call by its protocol, for failures before the
// handler ran (too large, malformed HTTP): the whole registry's, configured or not.
func styleFor(fc *fasthttp.RequestCtx) *registry.Errors {
	i, _ := registry.Match(registry.All, fcCall{fc})
	return registry.All[i].Errors
}
