package inject

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"time"
)

// webhookConfigs is what publishing a CA needs of the Kubernetes API (*Client).
type webhookConfigs interface {
	GetMutatingWebhookConfiguration(ctx context.Context, name string) ([]byte, error)
	PatchMutatingWebhookConfiguration(ctx context.Context, name string, jsonPatch []byte) error
}

// maxBundle caps the certificates kept in a caBundle. Every injector replica with a
// self-signed pair adds its own; expired ones and, beyond the cap, the oldest go.
const maxBundle = 8

// conflictRetries bounds the read-patch rounds lost to concurrent writers.
const conflictRetries = 8

// PublishCA makes the webhooks of the MutatingWebhookConfiguration name that call
// the Service service/namespace trust caPEM, keeping the certificates they already
// trust (other replicas' pairs) that have not expired. The patch is conditional on
// the object's resourceVersion, so replicas starting together do not undo each
// other's work. It reports whether the object was changed.
func PublishCA(ctx context.Context, api webhookConfigs, name, service, namespace string, caPEM []byte, now time.Time) (bool, error) {
	var lastErr error
	for range conflictRetries {
		raw, err := api.GetMutatingWebhookConfiguration(ctx, name)
		if err != nil {
			return false, fmt.Errorf("read MutatingWebhookConfiguration %s: %w", name, err)
		}
		patch, err := caPatch(raw, service, namespace, caPEM, now)
		if err != nil {
			return false, fmt.Errorf("MutatingWebhookConfiguration %s: %w", name, err)
		}
		if patch == nil {
			return false, nil
		}
		err = api.PatchMutatingWebhookConfiguration(ctx, name, patch)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, ErrConflict) {
			return false, fmt.Errorf("patch MutatingWebhookConfiguration %s: %w", name, err)
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return false, fmt.Errorf("patch MutatingWebhookConfiguration %s: gave up after %d conflicts: %w", name, conflictRetries, lastErr)
}

// mwc is the part of a MutatingWebhookConfiguration caPatch reads. Decoding only
// this much leaves alone every field a newer API version may add.
type mwc struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Webhooks []struct {
		Name         string `json:"name"`
		ClientConfig struct {
			CABundle []byte `json:"caBundle"`
			Service  *struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"service"`
		} `json:"clientConfig"`
	} `json:"webhooks"`
}

// caPatch is the JSON Patch adding caPEM to the bundle of each webhook that calls
// service/namespace, guarded by "test" operations; nil when none needs it.
func caPatch(raw []byte, service, namespace string, caPEM []byte, now time.Time) ([]byte, error) {
	var cfg mwc
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	ops := []Op{{"test", "/metadata/resourceVersion", cfg.Metadata.ResourceVersion}}
	matched := false
	for i, w := range cfg.Webhooks {
		s := w.ClientConfig.Service
		if s == nil || s.Name != service || s.Namespace != namespace {
			continue
		}
		matched = true
		bundle, err := mergeBundle(w.ClientConfig.CABundle, caPEM, now)
		if err != nil {
			return nil, fmt.Errorf("webhook %s: %w", w.Name, err)
		}
		if bytes.Equal(bundle, w.ClientConfig.CABundle) {
			continue
		}
		p := fmt.Sprintf("/webhooks/%d", i)
		ops = append(ops,
			Op{"test", p + "/name", w.Name},
			Op{"add", p + "/clientConfig/caBundle", base64.StdEncoding.EncodeToString(bundle)})
	}
	if !matched {
		return nil, fmt.Errorf("no webhook calls the Service %s/%s", namespace, service)
	}
	if len(ops) == 1 {
		return nil, nil
	}
	return json.Marshal(ops)
}

// mergeBundle returns the PEM bundle of old's unexpired certificates plus add's,
// newest last, at most maxBundle; old unchanged when add is already trusted.
func mergeBundle(old, add []byte, now time.Time) ([]byte, error) {
	adds, err := parseCerts(add)
	if err != nil || len(adds) == 0 {
		return nil, fmt.Errorf("the CA to publish: %w", errors.Join(err, errors.New("no certificate")))
	}
	olds, _ := parseCerts(old) // a bundle we cannot read is replaced
	keep := make([]*x509.Certificate, 0, len(olds)+len(adds))
	present := true
	for _, a := range adds {
		present = present && slices.ContainsFunc(olds, a.Equal)
	}
	for _, c := range olds {
		if now.Before(c.NotAfter) && !slices.ContainsFunc(adds, c.Equal) {
			keep = append(keep, c)
		}
	}
	if present && len(keep)+len(adds) == len(olds) {
		return old, nil
	}
	slices.SortStableFunc(keep, func(a, b *x509.Certificate) int { return a.NotBefore.Compare(b.NotBefore) })
	if over := len(keep) + len(adds) - maxBundle; over > 0 {
		keep = keep[min(over, len(keep)):]
	}
	var out bytes.Buffer
	for _, c := range append(keep, adds...) {
		_ = pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return out.Bytes(), nil
}

func parseCerts(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return out, nil
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return out, fmt.Errorf("certificate: %w", err)
		}
		out = append(out, c)
	}
}
