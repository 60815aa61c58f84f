package augment

import (
	"net"
	"net/http"
	"time"
)

// NewTransport is the net/http transport of the augmenters' model calls (a CAM's
// chat completions, a rag store's embeddings): proxied as the environment says
// (HTTP_PROXY, HTTPS_PROXY, NO_PROXY), pooled for many concurrent calls, HTTP/2
// where the server offers it. No transparent gzip: MaxAnswerBytes bounds the bytes
// as the server sent them. The data plane's upstream calls have a client of their
// own (package proxy).
func NewTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   1024,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
		WriteBufferSize:       32 << 10,
		ReadBufferSize:        32 << 10,
	}
}
