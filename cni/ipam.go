package cni

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ipam"
)

// The IPAM plugin's answers pass through the plugin attributed to it: its
// error's code stays as it gave it, and its message says whose it is
// ("ipoibd-cni: IPAM plugin host-local: missing containerID"), so that an
// operator looks at host-local, not at ipoibd-cni, for why.

// ipamErr attributes err, an error of n's IPAM plugin, to it.
func ipamErr(n *NetConf, op string, err error) error {
	if err == nil {
		return nil
	}
	who := "ipoibd-cni: IPAM plugin " + n.IPAM.Type + " (" + op + ")"
	var e *types.Error
	if errors.As(err, &e) {
		return &types.Error{Code: e.Code, Msg: who + ": " + e.Msg, Details: e.Details}
	}
	return types.NewError(types.ErrInternal, who, err.Error())
}

func ipamAdd(n *NetConf, stdin []byte) (types.Result, error) {
	r, err := ipam.ExecAdd(n.IPAM.Type, stdin)
	return r, ipamErr(n, "ADD", err)
}

func ipamDel(n *NetConf, stdin []byte) error {
	return ipamErr(n, "DEL", ipam.ExecDel(n.IPAM.Type, stdin))
}

func ipamCheck(n *NetConf, stdin []byte) error {
	return ipamErr(n, "CHECK", ipam.ExecCheck(n.IPAM.Type, stdin))
}

// ipamStatus and ipamGC ask an IPAM plugin that speaks CNI 1.1 (which
// brought STATUS and GC); one of before (Debian 12's host-local 1.1.1
// speaks up to 1.0.0) has neither, and would answer STATUS with "missing
// containerID": there is nothing to ask it.
func ipamStatus(n *NetConf, stdin []byte) error {
	if !ipamSpeaks11(n) {
		return nil
	}
	return ipamErr(n, "STATUS", ipam.ExecStatus(n.IPAM.Type, stdin))
}

func ipamGC(n *NetConf, stdin []byte) error {
	if !ipamSpeaks11(n) {
		return nil
	}
	return ipamErr(n, "GC", invoke.DelegateGC(context.TODO(), n.IPAM.Type, stdin, nil))
}

// ipamSpeaks11 says whether n's IPAM plugin lists CNI 1.1.0 in VERSION;
// one that cannot be found or asked is asked anyway, so its error shows.
func ipamSpeaks11(n *NetConf) bool {
	path, err := invoke.FindInPath(n.IPAM.Type, filepath.SplitList(os.Getenv("CNI_PATH")))
	if err != nil {
		return true
	}
	info, err := invoke.GetVersionInfo(context.TODO(), path, nil)
	return err != nil || slices.Contains(info.SupportedVersions(), "1.1.0")
}
