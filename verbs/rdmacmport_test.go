//go:build rdma

package verbs

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
)

// RDMACMPort hands package rdmacm the context librdmacm listed for the
// device, and refuses a device librdmacm never saw or one already closed.
func TestRDMACMPort(t *testing.T) {
	a, _ := openPair(t)
	p, err := a.dev.RDMACMPort()
	if err != nil || p.Context == nil || p.Port != 1 || p.Ethernet != (a.port().LinkLayer == "Ethernet") {
		t.Errorf("%s: RDMACMPort = %+v, %v; want its context, port 1 and its link layer", a.dev.Name(), p, err)
	}
	name := strings.Split(os.Getenv(devicesEnv), ",")[0]
	d, err := Open(Config{Device: name, Port: 1, GIDIndex: -1, NoRDMACM: true})
	if err != nil {
		t.Fatalf("Open(%s, NoRDMACM): %v", name, err)
	}
	if _, err := d.(*Device).RDMACMPort(); err == nil || !strings.Contains(err.Error(), "without librdmacm") {
		t.Errorf("RDMACMPort of a device opened with NoRDMACM: %v, want an error", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.(*Device).RDMACMPort(); !errors.Is(err, ib.ErrClosed) {
		t.Errorf("RDMACMPort after Close: %v, want ib.ErrClosed", err)
	}
}
