package testkit

import (
	"encoding/xml"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// S3 test credentials: any values work, the fake does not check signatures.
const (
	S3AccessKey = "AKIDCAMPROXYTEST"
	S3SecretKey = "camproxy-test-secret"
	S3Region    = "us-east-1"
)

// S3 is an in-process S3-protocol server (gofakes3 with its in-memory backend) on
// loopback. Point clients at URL with path-style addressing.
type S3 struct {
	URL string

	srv     *httptest.Server
	backend *s3mem.Backend
	refuse  atomic.Bool
	reqs    atomic.Int64
}

// NewS3 starts the server and creates the buckets. It panics if a bucket cannot be
// created (a bad name).
func NewS3(buckets ...string) *S3 {
	s := &S3{backend: s3mem.New()}
	for _, b := range buckets {
		if err := s.backend.CreateBucket(b); err != nil {
			panic(fmt.Sprintf("testkit: create bucket %q: %v", b, err))
		}
	}
	fake := gofakes3.New(s.backend)
	h := fake.Server()
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.reqs.Add(1)
		if s.refuse.Load() {
			writeS3Error(w, r, http.StatusServiceUnavailable, "SlowDown", "Please reduce your request rate.")
			return
		}
		h.ServeHTTP(w, r)
	}))
	s.URL = s.srv.URL
	return s
}

// S3Env points the AWS SDK's default chain at the fake's credentials and region
// alone for t: no profile, no instance metadata, no endpoint from the environment.
// A client made from an s3:// URI (its ?endpoint= the fake's URL) then reaches the
// fake and nothing else.
func S3Env(t testing.TB) {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("AWS_ACCESS_KEY_ID", S3AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", S3SecretKey)
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_REGION", S3Region)
	t.Setenv("AWS_DEFAULT_REGION", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", dir+"/config")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", dir+"/credentials")
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_ENDPOINT_URL_S3", "")
}

// StartS3 is NewS3 for t, with the environment S3Env sets; the server stops when t ends.
func StartS3(t testing.TB, buckets ...string) *S3 {
	t.Helper()
	S3Env(t)
	s := NewS3(buckets...)
	t.Cleanup(s.Close)
	return s
}

// Keys lists the keys of bucket under prefix.
func (s *S3) Keys(t testing.TB, bucket, prefix string) []string {
	t.Helper()
	out, err := s.Client().ListObjectsV2(t.Context(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	var keys []string
	for _, o := range out.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	return keys
}

// Close stops the server.
func (s *S3) Close() { s.srv.Close() }

// Refuse makes every request answer 503 SlowDown while on: an S3 that is down or
// throttling.
func (s *S3) Refuse(on bool) { s.refuse.Store(on) }

// Requests is how many requests the server has received, refused ones included.
func (s *S3) Requests() int64 { return s.reqs.Load() }

// Client returns a client for the server: static test credentials, path-style,
// region us-east-1, and no SDK retries (a refused request fails at once, so tests of
// a caller's own retry logic stay fast).
func (s *S3) Client() *s3.Client {
	return s3.New(s3.Options{
		Region:           S3Region,
		Credentials:      credentials.NewStaticCredentialsProvider(S3AccessKey, S3SecretKey, ""),
		BaseEndpoint:     aws.String(s.URL),
		UsePathStyle:     true,
		RetryMaxAttempts: 1,

		DisableLogOutputChecksumValidationSkipped: true,
	})
}

// writeS3Error answers in S3's XML error shape.
func writeS3Error(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("x-amz-request-id", "TESTKIT0REFUSED")
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return
	}
	_, _ = fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>%s</Code><Message>%s</Message><Resource>%s</Resource><RequestId>TESTKIT0REFUSED</RequestId></Error>`,
		code, msg, xmlEscape(r.URL.Path))
}

func xmlEscape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
