package rulesvc_test

import (
	"go/build"
	"strings"
	"testing"
)

// The rules service shares only the protocol package with the gateways:
// it must not link the gateway middleware or the gateways' sync client.
func TestServiceLinksNoGatewayCode(t *testing.T) {
	const module = "github.com/sluice-rl/sluice/"
	forbidden := []string{module + "gateway", module + "internal/rulesync"}
	seen := map[string]string{} // package: the package that imports it
	var walk func(pkg, from string)
	walk = func(pkg, from string) {
		if _, ok := seen[pkg]; ok || !strings.HasPrefix(pkg, module) {
			return
		}
		seen[pkg] = from
		p, err := build.Import(pkg, ".", 0)
		if err != nil {
			t.Fatalf("import %s: %v", pkg, err)
		}
		for _, imp := range p.Imports {
			walk(imp, pkg)
		}
	}
	walk(module+"internal/rulesvc", "")
	for _, f := range forbidden {
		if from, ok := seen[f]; ok {
			t.Errorf("internal/rulesvc links %s (imported by %s); share types through internal/rulesapi", f, from)
		}
	}
	if _, ok := seen[module+"internal/rulesapi"]; !ok {
		t.Errorf("internal/rulesvc does not use internal/rulesapi, the protocol package")
	}
}
