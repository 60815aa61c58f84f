package redisx

import (
	"net/url"
	"strings"
)

// redactMask replaces secrets in Redact's output.
const redactMask = "****"

// Redact returns uri (a Redis URL, or any URL) with any password replaced by "****", safe for logs and metric
// labels: the password of the user info, and the value of any query parameter whose
// name suggests a secret. It is camproxy's one URL redactor: logs, metric labels,
// config.Redacted and the config config check prints all mask with it. A string that does not parse as a URL and holds an "@" is
// masked whole, and so is everything after the scheme when an "@" shows up past the
// host (a password with an unescaped "/", "?" or "#" in it).
func Redact(uri string) string {
	u, err := url.Parse(uri)
	if err != nil {
		if strings.Contains(uri, "@") {
			return redactMask
		}
		return uri
	}
	if u.Scheme != "file" && strings.Contains(u.Path+u.RawQuery+u.Fragment, "@") {
		return u.Scheme + "://" + redactMask
	}
	out := uri
	if _, ok := u.User.Password(); ok {
		// Assemble by hand: url.URL.String would escape the mask as %2A.
		userinfo := url.User(u.User.Username()).String() + ":" + redactMask + "@"
		r := *u
		r.User = nil
		rest, ok := strings.CutPrefix(r.String(), r.Scheme+"://")
		if !ok {
			return redactMask
		}
		out = u.Scheme + "://" + userinfo + rest
	}
	if u.RawQuery == "" {
		return out
	}
	head, query, ok := strings.Cut(out, "?")
	if !ok {
		return out
	}
	query, frag, hasFrag := strings.Cut(query, "#")
	parts := strings.Split(query, "&")
	for i, p := range parts {
		k, _, _ := strings.Cut(p, "=")
		name, err := url.QueryUnescape(k)
		if err != nil {
			name = k
		}
		// On a Redis URL ?key= is learn.store's key prefix (its older name), never a
		// secret: masked, the redacted URL would name another prefix.
		if secretParam(name) && !(name == "key" && (u.Scheme == "redis" || u.Scheme == "rediss")) {
			parts[i] = k + "=" + redactMask
		}
	}
	out = head + "?" + strings.Join(parts, "&")
	if hasFrag {
		out += "#" + frag
	}
	return out
}

// secretParam reports whether a query parameter's name suggests a secret value:
// passwords, tokens, API keys (key, apikey, api_key), and a presigned URL's
// signature and credential (X-Amz-Signature, X-Amz-Credential).
func secretParam(name string) bool {
	n := strings.ToLower(name)
	for _, s := range []string{"pass", "secret", "token", "auth", "key", "signature", "credential"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}
