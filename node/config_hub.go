package node

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/llmswarm/llmswarm/shards"
)

// HubConfig is where POST /v1/models/pull fetches models from: a model hub
// that speaks Hugging Face's API (docs/models.md).
type HubConfig struct {
	// Endpoint is the hub's base URL; default https://huggingface.co.
	// swarmd takes HF_ENDPOINT from its environment when this is unset.
	Endpoint string `json:"endpoint,omitempty"`
	// Token is sent to the hub for gated and private repos; swarmd takes
	// HF_TOKEN from its environment when this is unset. A pull request
	// may carry its own.
	Token string `json:"token,omitempty"`
}

func (c HubConfig) withDefaults() HubConfig {
	if c.Endpoint == "" {
		c.Endpoint = shards.DefaultHubEndpoint
	}
	return c
}

func (c HubConfig) validate() error {
	u, err := url.Parse(c.Endpoint)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("config: hub.endpoint %q: want an http(s) base URL such as https://huggingface.co", c.Endpoint)
	}
	if strings.ContainsAny(c.Token, " \t\r\n") {
		return fmt.Errorf("config: hub.token: contains white space")
	}
	return nil
}
