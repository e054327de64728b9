package verbs

import (
	"os/exec"
	"strings"
	"testing"
)

// The provider knows devices, not connections: neither build of it may
// depend on the CM or on IPoIB (the kernel CM's connection service, which
// needs both, is package rdmacm).
func TestNoCMOrIPoIBDependency(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the dependencies with")
	}
	const module = "github.com/ipoibd/ipoibd/"
	for _, tags := range []string{"", "rdma"} {
		out, err := exec.Command(goTool, "list", "-deps", "-tags="+tags, "-f", "{{.ImportPath}}", ".").Output()
		if err != nil {
			t.Fatalf("go list -deps -tags=%q: %v", tags, err)
		}
		deps := strings.Fields(string(out))
		if len(deps) == 0 || deps[len(deps)-1] != module+"verbs" {
			t.Fatalf("go list -deps -tags=%q listed %v, not verbs last", tags, deps)
		}
		for _, d := range deps {
			for _, banned := range []string{module + "cm", module + "ipoib"} {
				if d == banned || strings.HasPrefix(d, banned+"/") {
					t.Errorf("with tags %q verbs depends on %s", tags, d)
				}
			}
		}
	}
}
