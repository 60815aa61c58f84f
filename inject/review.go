package inject

import (
	"encoding/json"
	"errors"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// The AdmissionReview versions the webhook speaks; it answers in the version asked.
const (
	ReviewV1      = "admission.k8s.io/v1"
	ReviewV1beta1 = "admission.k8s.io/v1beta1"
)

// request is what the webhook needs of an AdmissionReview request, whatever its version.
type request struct {
	apiVersion  string
	uid         types.UID
	kind        metav1.GroupVersionKind
	resource    metav1.GroupVersionResource
	subResource string
	operation   string
	namespace   string
	name        string
	object      []byte
}

// isPodCreate reports whether the request creates a pod: the only thing injected.
func (r *request) isPodCreate() bool {
	return r.kind.Group == "" && r.kind.Kind == "Pod" && r.subResource == "" &&
		r.operation == string(admissionv1.Create) && len(r.object) > 0
}

// parseReview reads an AdmissionReview request of either version. It fails only
// when there is nothing to answer: not an AdmissionReview, or no request UID.
func parseReview(body []byte) (*request, error) {
	var tm metav1.TypeMeta
	if err := utiljson.Unmarshal(body, &tm); err != nil {
		return nil, fmt.Errorf("not an AdmissionReview: %w", err)
	}
	if tm.Kind != "AdmissionReview" {
		return nil, fmt.Errorf("kind %q: want AdmissionReview", tm.Kind)
	}
	var r request
	switch tm.APIVersion {
	case ReviewV1:
		var rv admissionv1.AdmissionReview
		if err := utiljson.Unmarshal(body, &rv); err != nil {
			return nil, fmt.Errorf("AdmissionReview %s: %w", tm.APIVersion, err)
		}
		if rv.Request == nil {
			return nil, errors.New("AdmissionReview has no request")
		}
		q := rv.Request
		r = request{uid: q.UID, kind: q.Kind, resource: q.Resource, subResource: q.SubResource,
			operation: string(q.Operation), namespace: q.Namespace, name: q.Name, object: q.Object.Raw}
	case ReviewV1beta1:
		var rv admissionv1beta1.AdmissionReview
		if err := utiljson.Unmarshal(body, &rv); err != nil {
			return nil, fmt.Errorf("AdmissionReview %s: %w", tm.APIVersion, err)
		}
		if rv.Request == nil {
			return nil, errors.New("AdmissionReview has no request")
		}
		q := rv.Request
		r = request{uid: q.UID, kind: q.Kind, resource: q.Resource, subResource: q.SubResource,
			operation: string(q.Operation), namespace: q.Namespace, name: q.Name, object: q.Object.Raw}
	default:
		return nil, fmt.Errorf("apiVersion %q: want %s or %s", tm.APIVersion, ReviewV1, ReviewV1beta1)
	}
	if r.uid == "" {
		return nil, errors.New("AdmissionReview request has no uid")
	}
	r.apiVersion = tm.APIVersion
	return &r, nil
}

// respond encodes the answer to r: always allowed, with res's patch if it has one.
func (r *request) respond(res Result) ([]byte, error) {
	var patch []byte
	if len(res.Patch) > 0 {
		var err error
		if patch, err = json.Marshal(res.Patch); err != nil {
			return nil, fmt.Errorf("encode patch: %w", err)
		}
	}
	tm := metav1.TypeMeta{APIVersion: r.apiVersion, Kind: "AdmissionReview"}
	switch r.apiVersion {
	case ReviewV1beta1:
		resp := &admissionv1beta1.AdmissionResponse{UID: r.uid, Allowed: true, Warnings: res.Warnings}
		if patch != nil {
			pt := admissionv1beta1.PatchTypeJSONPatch
			resp.Patch, resp.PatchType = patch, &pt
		}
		return json.Marshal(admissionv1beta1.AdmissionReview{TypeMeta: tm, Response: resp})
	default:
		resp := &admissionv1.AdmissionResponse{UID: r.uid, Allowed: true, Warnings: res.Warnings}
		if patch != nil {
			pt := admissionv1.PatchTypeJSONPatch
			resp.Patch, resp.PatchType = patch, &pt
		}
		return json.Marshal(admissionv1.AdmissionReview{TypeMeta: tm, Response: resp})
	}
}
