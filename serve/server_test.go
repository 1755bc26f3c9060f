package serve

import (
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestHealthAndOpenRoutesNeedNoToken(t *testing.T) {
	ts := newTestServer(t, DefaultConfig(), false)
	for _, path := range []string{"/healthz", "/metrics", "/openapi.yaml"} {
		if code, body := ts.doWith("GET", path, nil, nil); code != 200 {
			t.Errorf("%s: %d %s", path, code, body)
		}
	}
}

// TestOpenAPIListsEveryRoute: openapi.yaml documents exactly the routes
// the server answers.
func TestOpenAPIListsEveryRoute(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method := range ops {
			if method != "parameters" {
				documented = append(documented, strings.ToUpper(method)+" "+path)
			}
		}
	}
	sort.Strings(documented)
	served := []string{"DELETE /v1/sessions/{id}", "GET /healthz", "GET /metrics", "GET /openapi.yaml", "GET /v1/sessions", "GET /v1/sessions/{id}",
		"POST /v1/sessions", "POST /v1/sessions/{id}/assess", "POST /v1/sessions/{id}/resume", "POST /v1/sessions/{id}/steps/{n}/label",
		"POST /v1/sessions/{id}/steps/{n}/result"}
	if !slices.Equal(documented, served) {
		t.Errorf("documented %v, served %v", documented, served)
	}
	src, err := os.ReadFile("server.go")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?:v1|open)\("((?:GET|POST|DELETE) [^"]+)"`)
	var registered []string
	for _, m := range re.FindAllStringSubmatch(string(src), -1) {
		registered = append(registered, m[1])
	}
	sort.Strings(registered)
	if !slices.Equal(registered, served) {
		t.Errorf("server.go registers %v", registered)
	}
}
