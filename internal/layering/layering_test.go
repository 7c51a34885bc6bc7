package layering

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/sluice-rl/sluice/"

// TestImportsPointDown lists every package of the module with go list and
// checks that none imports a package on a higher layer, and that every
// package has a layer.
func TestImportsPointDown(t *testing.T) {
	layer := map[string]int{}
	for i, ps := range Layers {
		for _, p := range ps {
			layer[p] = i
		}
	}
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		p := strings.TrimPrefix(f[0], module)
		if p == "internal/layering" || strings.HasPrefix(p, "test/") || p == "deploy" {
			continue // tests and checks of the whole, on no layer
		}
		at, ok := layer[p]
		if !ok {
			t.Errorf("package %s has no layer: add it to layering.Layers and docs/architecture.md", p)
			continue
		}
		for _, imp := range f[1:] {
			dep, ours := strings.CutPrefix(imp, module)
			if !ours {
				continue
			}
			if l, ok := layer[dep]; ok && l > at {
				t.Errorf("%s (layer %d) imports %s (layer %d): imports must point down", p, at, dep, l)
			}
		}
	}
}

// TestBinaryLinksNoTestPackages checks that the sluice binary does not
// link the standard library's test helpers: net/http/httptest carries a
// test certificate and private key, which have no place in a shipped
// binary (and which scanners of images flag), and testing adds flags.
func TestBinaryLinksNoTestPackages(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", module+"cmd/sluice").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for dep := range strings.Lines(string(out)) {
		switch dep = strings.TrimSpace(dep); dep {
		case "testing", "net/http/httptest", "net/http/internal/testcert":
			t.Errorf("cmd/sluice links %s, a test-only package; keep it in _test files", dep)
		}
	}
}
