package ipoib

import (
	"os/exec"
	"strings"
	"testing"
)

// The interface talks to adapters, the SA and the kernel CM only through
// interfaces (ib, Subnet, the connection service): no transport package
// may be among its imports, with or without rdma-core.
func TestNoTransportImports(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to list the imports with")
	}
	transports := []string{"umadsa", "verbs", "softib", "rdmacm"}
	for _, tags := range []string{"", "rdma"} {
		out, err := exec.Command(goTool, "list", "-tags", tags, "-deps", "-f", "{{.ImportPath}}", ".").Output()
		if err != nil {
			t.Fatalf("go list -tags %q: %v", tags, err)
		}
		for _, p := range strings.Fields(string(out)) {
			for _, tr := range transports {
				if p == "github.com/ipoibd/ipoibd/"+tr {
					t.Errorf("with tags %q ipoib imports the transport %s", tags, p)
				}
			}
		}
	}
}
