package location

import (
	"net/url"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/camproxy/camproxy/internal/redisx"
)

// Redact returns uri with any password replaced by "****", safe for logs and metric
// labels (see redisx.Redact).
func Redact(uri string) string { return redisx.Redact(uri) }

// URI reads a plain directory path (./camproxy-data/replay, /data/replay: IsDir) as
// the file:// URI of that directory, escaped (a "#" or "%" in a path is no URI
// syntax); a URI (file:rel/dir too) is returned as it is.
func URI(s string) string {
	if s == "" || !IsDir(s) {
		return s
	}
	abs, err := filepath.Abs(s)
	if err != nil {
		return "file:" + filepath.ToSlash(s) // no working directory: relative, as given
	}
	return (&url.URL{Scheme: File, Path: filepath.ToSlash(abs)}).String()
}

// RedisClient makes the client a parsed Redis location names (a replay stream or a
// store's keys); it does not connect. Unless the URI chose otherwise, the client
// gives up on a down Redis after one dial instead of go-redis's five with backoff:
// the recorder spools a failed batch and retries on its own schedule, and the
// learner retries its store at its next check, so a long wait only holds work back.
func (s *Spec) RedisClient() (redis.UniversalClient, error) {
	s.Redis.Tune(redisx.Tuning{MaxRetries: 1, DialerRetries: 1, ClusterReload: 5 * time.Second})
	rdb, err := s.Redis.Client()
	if err != nil {
		return nil, s.Bad(err)
	}
	return rdb, nil
}
