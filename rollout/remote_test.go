package rollout

import (
	"strings"
	"testing"
)

func TestRemoteConfigValidate(t *testing.T) {
	cases := []struct {
		set  func(*RemoteConfig)
		want string
	}{
		{func(c *RemoteConfig) {}, ""},
		{func(c *RemoteConfig) { c.Generator = "gpu" }, "generator must be"},
		{func(c *RemoteConfig) { c.Generator = GeneratorOpenAI }, "endpoint must be an http(s) URL"},
		{func(c *RemoteConfig) { c.Generator, c.Endpoint = GeneratorOpenAI, "ftp://x" }, "endpoint must be"},
		{func(c *RemoteConfig) { c.Generator, c.Endpoint = GeneratorOpenAI, "http://127.0.0.1:8000/v1" }, ""},
		{func(c *RemoteConfig) {
			c.Generator, c.Endpoint, c.RemoteAPI = GeneratorOpenAI, "https://api.openai.com/v1", RemoteChat
		}, "remote_model must name"},
		{func(c *RemoteConfig) { c.RemoteAPI = "tgi" }, "remote_api must be"},
		{func(c *RemoteConfig) { c.RemoteTimeoutS = 0 }, "remote_timeout_s"},
		{func(c *RemoteConfig) { c.RemoteRetries = -1 }, "remote_retries"},
		{func(c *RemoteConfig) { c.RemoteConcurrency = 0 }, "remote_concurrency"},
		{func(c *RemoteConfig) { c.RemoteLogprobs = 21 }, "remote_logprobs"},
	}
	for i, c := range cases {
		cfg := DefaultRemoteConfig()
		c.set(&cfg)
		err := cfg.Validate()
		if (c.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("case %d: error %v, want %q", i, err, c.want)
		}
	}
}
