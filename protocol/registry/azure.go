package registry

import (
	"bytes"
	"errors"
	"strings"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/openai"
	"github.com/camproxy/camproxy/protocol/responses"
)

// Azure OpenAI serves OpenAI's wire under /openai/: per deployment
// (/openai/deployments/{d}/chat/completions?api-version=…, …/responses), the
// resource-wide Responses path (/openai/responses?api-version=…) and the v1 form
// (/openai/v1/chat/completions, /openai/v1/responses), which takes no api-version.
// Bodies, answers and errors are OpenAI's, so the entries reuse OpenAI's parsers;
// what differs is the path and the upstream. The api-version query is the
// client's and is forwarded as sent.

// AzureChat is Azure OpenAI's Chat Completions. It owns the rest of /openai/
// (embeddings, images, files, deployments listing …): the azure upstream gets them
// untouched.
var AzureChat = &Protocol{Name: "openai", Explain: "azure-openai", Provider: AzureOpenAI,
	Example: "/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21",
	Augments: func(c Call) bool {
		p, ok := parseAzurePath(c.Path())
		return ok && p.api == azureChat
	},
	Owns: func(c Call) bool {
		path := c.Path()
		return bytes.HasPrefix(path, []byte("/openai/")) || string(path) == "/openai"
	},
	Parse:     azureParse(openai.Parse),
	ParseBody: body(openai.Parse),
	Errors:    OpenAIErrors,
}

// AzureResponses is Azure OpenAI's Responses API.
var AzureResponses = &Protocol{Name: "openai", Explain: "azure-responses", Provider: AzureOpenAI,
	Example: "/openai/responses?api-version=2025-04-01-preview",
	Augments: func(c Call) bool {
		p, ok := parseAzurePath(c.Path())
		return ok && p.api == azureResponses
	},
	Parse:     azureParse(responses.Parse),
	ParseBody: body(responses.Parse),
	Errors:    OpenAIErrors,
}

// The APIs an Azure path names.
const (
	azureChat      = "chat/completions"
	azureResponses = "responses"
)

// azurePath is what an augmented Azure OpenAI path says: its API and, on the
// deployments form, the deployment.
type azurePath struct {
	deployment string // "" on /openai/responses and /openai/v1/…
	api        string // azureChat or azureResponses
}

// parseAzurePath reads a decoded path: /openai/deployments/{d}/{api},
// /openai/responses, or /openai/v1/{api}. A deployment name is one non-empty
// path segment.
func parseAzurePath(path []byte) (azurePath, bool) {
	rest, ok := bytes.CutPrefix(path, []byte("/openai/"))
	if !ok {
		return azurePath{}, false
	}
	var p azurePath
	switch {
	case bytes.HasPrefix(rest, []byte("deployments/")):
		d, api, ok := strings.Cut(string(rest[len("deployments/"):]), "/")
		if !ok || d == "" {
			return azurePath{}, false
		}
		p.deployment, p.api = d, api
	case bytes.HasPrefix(rest, []byte("v1/")):
		p.api = string(rest[len("v1/"):])
	default:
		p.api = string(rest)
		if p.api != azureResponses { // only Responses has a resource-wide path
			return azurePath{}, false
		}
	}
	if p.api != azureChat && p.api != azureResponses {
		return azurePath{}, false
	}
	return p, true
}

// azureParse reads an Azure call's body with OpenAI's parser. The model is the
// body's, else the deployment the path names (Azure routes by the deployment and
// does not need a model in the body).
func azureParse[R protocol.Request](parse func([]byte, []protocol.TaskRule) (R, error)) func(Call, []byte, []protocol.TaskRule) (protocol.Request, error) {
	return func(c Call, b []byte, rules []protocol.TaskRule) (protocol.Request, error) {
		p, ok := parseAzurePath(c.Path())
		if !ok {
			return nil, errors.New("not an Azure OpenAI chat completions or responses path")
		}
		r, err := parse(b, rules)
		if err != nil {
			return nil, err
		}
		if v := r.Parsed(); v.Model == "" {
			v.Model = p.deployment
		}
		return r, nil
	}
}
