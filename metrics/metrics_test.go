package metrics

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
)

// TestDependencyUpReadAtScrape: camproxy_dependency_up{dependency,part} is each
// part's state when scraped, so a part that went to its fallback and came back
// shows it without anyone setting the gauge.
func TestDependencyUpReadAtScrape(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	var cacheUp atomic.Bool
	cacheUp.Store(true)
	m.Dependencies.Add("redis", "cache", cacheUp.Load)
	m.Dependencies.Add("redis", "episodes", func() bool { return true })
	scrape := func() string {
		b, err := testutil.CollectAndFormat(m.Dependencies, expfmt.TypeTextPlain, "camproxy_dependency_up")
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	want := func(cache string) string {
		return `camproxy_dependency_up{dependency="redis",part="cache"} ` + cache
	}
	if got := scrape(); !strings.Contains(got, want("1")) {
		t.Fatalf("scrape: %s", got)
	}
	cacheUp.Store(false)
	if got := scrape(); !strings.Contains(got, want("0")) || !strings.Contains(got, `part="episodes"} 1`) {
		t.Fatalf("after the cache fell back: %s", got)
	}
	if v := m.Dependencies.Up("redis", "cache"); v != 0 {
		t.Fatalf("Up(cache) = %v", v)
	}
	if v := m.Dependencies.Up("redis", "nope"); v != -1 {
		t.Fatalf("Up(unknown) = %v", v)
	}
	if n, err := testutil.GatherAndCount(reg, "camproxy_dependency_up"); err != nil || n != 2 {
		t.Fatalf("registered series: %d, %v", n, err)
	}
}
