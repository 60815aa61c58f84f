// Package location parses the URIs that name a replay buffer or a playbook store:
// file (a directory), redis/rediss (single node, Cluster and Sentinel forms, through
// redisx) and s3 (a bucket and prefix); it also redacts them for messages (Redact),
// reads a plain path as a file URI (URI) and makes a Redis location's client. It
// makes no network call, touches no disk and links no AWS SDK (internal/s3x makes the
// S3 clients). Config validation, serve, the command line and the playbook store all
// parse with it, so a URI that `camproxy config check` accepts is one that serve opens.
package location

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/camproxy/camproxy/internal/redisx"
)

// The schemes of a Spec ("rediss" is Redis, with TLS in its options).
const (
	File  = "file"
	Redis = "redis"
	S3    = "s3"
)

// ErrBadURI is wrapped by every error about a URI that cannot be used.
var ErrBadURI = errors.New("bad URI")

// Error is what is wrong with a URI. Its URI is redacted (redisx.Redact).
type Error struct {
	What   string // what the URI names: "replay URI", "playbook store"
	URI    string
	Reason string // the problem, without the URI: what config shows beside its key
}

func (e *Error) Error() string {
	if e.URI == "" {
		return "bad " + e.What + ": " + e.Reason
	}
	return "bad " + e.What + " " + e.URI + ": " + e.Reason
}
func (e *Error) Unwrap() error { return ErrBadURI }

// Reason is what is wrong, without the URI, when err is an *Error; else err's text.
func Reason(err error) string {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Reason
	}
	return err.Error()
}

// Spec is a parsed URI.
type Spec struct {
	Scheme string // File, Redis or S3

	// File: the directory, cleaned, in the OS's form.
	Dir string

	// Redis: the server(s), with go-redis's options; the parameters below taken out.
	Redis  *redisx.URL
	Stream string // a replay URI's stream (?stream=)
	MaxLen int64  // a replay URI's ?maxlen= (0: none)
	// KeyPrefix is a store's ?prefix= (alias ?key=); "" when the URI names none.
	KeyPrefix string

	// S3. Region and Endpoint are "" when not given.
	Bucket, Prefix, Region, Endpoint string

	form *form
	uri  string // redacted
}

// String is the URI with any password masked, for messages and metric labels.
func (s *Spec) String() string { return s.uri }

// Bad is an error worded like Parse's for a problem with s found after parsing
// (go-redis refusing an option when the client is made): err's text, without
// redisx's "bad Redis URL" (the Error says what is bad).
func (s *Spec) Bad(err error) error { return s.bad(redisReason(err)) }

// redisReason is err's text without redisx's "bad Redis URL".
func redisReason(err error) string {
	return strings.TrimPrefix(err.Error(), redisx.ErrBadURL.Error()+": ")
}

func (s *Spec) bad(reason string) error {
	return &Error{What: s.form.what, URI: s.uri, Reason: reason}
}

// form is what differs between a replay URI and a store location: the name in
// messages, the hint on a scheme, and the parameters of a Redis URI.
type form struct {
	what, schemes string
	redisParams   []string
	redis         func(sp *Spec) string // reads redisParams into sp; returns a reason, or ""
}

var replayForm = &form{
	what:        "replay URI",
	schemes:     "file, redis, rediss or s3",
	redisParams: []string{"stream", "maxlen"},
	redis: func(sp *Spec) string {
		sp.Stream = redisx.LastValue(sp.Redis.Params, "stream")
		if sp.Stream == "" {
			return "no stream name; add ?stream=camproxy:replay"
		}
		if v := redisx.LastValue(sp.Redis.Params, "maxlen"); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return fmt.Sprintf("maxlen %q is not a whole number >= 0", v)
			}
			sp.MaxLen = n
		}
		return ""
	},
}

var storeForm = &form{
	what:        "playbook store",
	schemes:     "a directory, file, redis, rediss or s3",
	redisParams: []string{"prefix", "key"},
	redis: func(sp *Spec) string {
		sp.KeyPrefix = redisx.LastValue(sp.Redis.Params, "prefix")
		if sp.KeyPrefix == "" {
			sp.KeyPrefix = redisx.LastValue(sp.Redis.Params, "key") // the older name
		}
		return ""
	},
}

// Parse parses a replay URI:
//
//	file:///abs/dir   file://./rel/dir   file:rel/dir   file://localhost/abs/dir
//	redis://[user:pass@]host:6379/0?stream=camproxy:replay[&maxlen=1000000]   (rediss:// for TLS;
//	    ...&addr=host2:6379 for a cluster, ...&master_name=NAME for Sentinel; go-redis's options)
//	s3://bucket/prefix[?region=us-east-1][&endpoint=http://127.0.0.1:9000]
func Parse(uri string) (*Spec, error) { return replayForm.parse(uri) }

// ParseStore parses where a playbook store is: a directory (IsDir), or a URI as
// Parse takes, except that a Redis URI names a key prefix (?prefix=, or its older
// name ?key=) instead of a stream.
func ParseStore(s string) (*Spec, error) {
	if !IsDir(s) {
		return storeForm.parse(s)
	}
	sp := &Spec{Scheme: File, form: storeForm, uri: s} // a path holds no password
	if sp.Dir = cleanDir(s); sp.Dir == "" {
		return nil, sp.bad(dirProblem(s, "required: a directory, s3://bucket/prefix or redis://host:6379/0?prefix=PREFIX"))
	}
	return sp, nil
}

// IsDir reports whether s is a plain directory path rather than a URI: it holds no
// "://" and does not start with a scheme of this package ("file:rel/dir" is a URI,
// "s3:bucket" a mistyped one).
func IsDir(s string) bool {
	if strings.Contains(s, "://") {
		return false
	}
	scheme, _, ok := strings.Cut(s, ":")
	switch strings.ToLower(scheme) {
	case File, Redis, "rediss", S3:
		return !ok
	}
	return true
}

func (f *form) parse(uri string) (*Spec, error) {
	sp := &Spec{form: f, uri: redisx.Redact(uri)}
	u, err := url.Parse(uri)
	if err != nil {
		if strings.Contains(uri, "@") {
			// url.Parse's message may quote part of a password.
			return nil, sp.bad("not a valid URL")
		}
		return nil, sp.bad(fmt.Sprintf("not a valid URL: %v", redisx.URLError(err)))
	}
	if strings.Contains(uri, "#") {
		return nil, sp.bad(`unexpected "#" (escape it as %23)`)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, sp.bad(fmt.Sprintf("bad query: %v", err))
	}
	var reason string
	switch u.Scheme {
	case File:
		reason = sp.file(u, q)
	case Redis, "rediss":
		reason = sp.redis(uri)
	case S3:
		reason = sp.s3(u, q)
	case "":
		reason = "no scheme; use file://, redis://, rediss:// or s3://"
	default:
		reason = fmt.Sprintf("unknown scheme %q; use %s", u.Scheme, f.schemes)
	}
	if reason != "" {
		return nil, sp.bad(reason)
	}
	return sp, nil
}

func (sp *Spec) file(u *url.URL, q url.Values) string {
	sp.Scheme = File
	if len(q) > 0 {
		return "a file URI takes no query parameters"
	}
	if u.User != nil {
		return "a file URI takes no user"
	}
	var dir string
	switch {
	case u.Opaque != "": // file:rel/dir
		dir = u.Opaque
	case u.Host == "" || u.Host == "localhost":
		dir = u.Path
	case u.Host == "." || u.Host == "..":
		dir = u.Host + u.Path
	default:
		return fmt.Sprintf("file URI host %q: use file:///abs/dir, or file://./rel/dir for a relative one", u.Host)
	}
	if sp.Dir = cleanDir(filepath.FromSlash(dir)); sp.Dir == "" {
		return dirProblem(dir, "a file URI needs a directory, e.g. file:///var/lib/camproxy/replay or file://./camproxy-data/replay")
	}
	return ""
}

// cleanDir is dir cleaned, or "" when dir is no directory (empty, or with a NUL byte,
// which no file system takes).
func cleanDir(dir string) string {
	if dir == "" || strings.ContainsRune(dir, 0) {
		return ""
	}
	return filepath.Clean(dir)
}

// dirProblem says why cleanDir refused dir; empty is what to say for an empty one.
func dirProblem(dir, empty string) string {
	if dir == "" {
		return empty
	}
	return "the directory holds a NUL byte"
}

func (sp *Spec) redis(uri string) string {
	sp.Scheme = Redis
	ru, err := redisx.Parse(uri, sp.form.redisParams...)
	if err != nil {
		return redisReason(err)
	}
	sp.Redis = ru
	return sp.form.redis(sp)
}

func (sp *Spec) s3(u *url.URL, q url.Values) string {
	sp.Scheme = S3
	if u.User != nil {
		return "credentials do not go in an s3 URI: camproxy uses the AWS default credential chain"
	}
	if u.Opaque != "" || u.Host == "" {
		return "an s3 URI needs a bucket, e.g. s3://bucket/prefix"
	}
	if u.Port() != "" || strings.ContainsAny(u.Host, ":[]") {
		return "the host of an s3 URI is the bucket name; give a server as ?endpoint=http://host:port"
	}
	sp.Bucket, sp.Prefix = u.Host, strings.Trim(u.Path, "/")
	for k := range q {
		if k != "region" && k != "endpoint" {
			return fmt.Sprintf("unknown query parameter %q; an s3 URI takes region and endpoint", k)
		}
	}
	sp.Region = redisx.LastValue(q, "region")
	for _, c := range sp.Region {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return fmt.Sprintf("region %q is not a region name such as us-east-1", sp.Region)
		}
	}
	if ep := redisx.LastValue(q, "endpoint"); ep != "" {
		e, err := url.Parse(ep)
		if err != nil || e.Scheme != "http" && e.Scheme != "https" || e.Host == "" {
			return "endpoint must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:9000"
		}
		if e.User != nil {
			return "endpoint must not hold credentials"
		}
		sp.Endpoint = ep
	}
	return ""
}
