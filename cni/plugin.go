// Package cni is ipoibd's CNI plugin (ipoibd-cni): it gives a pod its own
// IPoIB interface, a P_Key child that the node's ipoibd makes in the pod's
// network namespace and serves there (ipoibd child add --netns --owner),
// with the addresses a standard IPAM plugin (host-local, static, ...)
// hands out. It implements CNI 1.1's ADD, DEL, CHECK, GC and STATUS (and
// answers VERSION for every version the reference library knows).
//
// Each attachment (container ID, interface name) is one child, owned by
// "cni/NETWORK/CONTAINERID/IFNAME": pods on one node may share a
// partition, each child with its own UD QP and connections. A child goes
// with its daemon, so a daemon restart leaves the pod without its
// interface: CHECK says so, and ADD again makes the child anew with the
// addresses the attachment had (its IPAM result is kept in dataDir from
// ADD to DEL).
package cni

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/ipoibd/ipoibd/control"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/containernetworking/plugins/pkg/ip"
	"github.com/containernetworking/plugins/pkg/ipam"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
)

// ErrChildMissing (a plugin-specific CNI error code, 100 and up are ours)
// is CHECK's answer when the daemon has no child for the attachment,
// e.g. after it restarted: ADD again makes it anew.
const ErrChildMissing uint = 100

// Funcs are the plugin's commands, for skel.PluginMainFuncs.
var Funcs = skel.CNIFuncs{Add: Add, Del: Del, Check: Check, GC: GC, Status: Status}

// Versions are the CNI versions the plugin speaks.
var Versions = version.All

// owner names an attachment's child in the daemon.
func owner(n *NetConf, containerID, ifname string) string {
	return ownerPrefix(n) + containerID + "/" + ifname
}

func ownerPrefix(n *NetConf) string { return "cni/" + n.Name + "/" }

// daemonDown is the CNI error for a master that no daemon serves.
func daemonDown(n *NetConf, err error) error {
	return types.NewError(types.ErrTryAgainLater, "ipoibd-cni: no ipoibd serves "+n.Master+" (start it, then try again)", err.Error())
}

// Add makes the pod's child: addresses from IPAM (or the ones kept for
// this attachment), the child from the daemon, routes in the pod.
func Add(args *skel.CmdArgs) (err error) {
	n, err := loadConf(args.StdinData)
	if err != nil {
		return err
	}
	if err := ns.IsNSorErr(args.Netns); err != nil {
		return types.NewError(types.ErrInvalidNetNS, "ipoibd-cni: "+args.Netns+" is not a network namespace", err.Error())
	}
	parent, err := show(n.Master)
	if err != nil {
		return daemonDown(n, err)
	}
	pkey := n.PKey
	if pkey == "" {
		pkey = fmt.Sprintf("%#04x", parent.PKey)
	}
	kept, err := loadState(n, args.ContainerID, args.IfName)
	if err != nil {
		return types.NewError(types.ErrIOFailure, "ipoibd-cni: reading the attachment's state", err.Error())
	}
	addrs := kept
	if kept == nil {
		if addrs, err = allocate(n, args); err != nil {
			return err
		}
		defer func() {
			if err == nil {
				return
			}
			// A failed ADD leaves no allocation behind.
			if n.IPAM.Type != "" {
				_ = ipam.ExecDel(n.IPAM.Type, args.StdinData)
			}
			_ = removeState(n, args.ContainerID, args.IfName)
		}()
	}
	// A child the daemon still has for this attachment goes first: the
	// ADD makes it anew.
	who := owner(n, args.ContainerID, args.IfName)
	if err := delChild(n.Master, who); err != nil {
		return err
	}
	req := control.ChildRequest{PKey: pkey, Name: args.IfName, Mode: n.Mode, MTU: n.MTU, Netns: args.Netns, Owner: who}
	for _, a := range addrs.IPs {
		req.Addrs = append(req.Addrs, a.Address.String())
	}
	child, err := addChild(n.Master, req)
	if err != nil {
		return types.NewError(types.ErrInternal, "ipoibd-cni: ipoibd of "+n.Master+" made no child", err.Error())
	}
	defer func() {
		if err != nil {
			_ = delChild(n.Master, who)
		}
	}()
	if err := ns.WithNetNSPath(args.Netns, func(ns.NetNS) error { return addRoutes(args.IfName, addrs.Routes) }); err != nil {
		return types.NewError(types.ErrInternal, "ipoibd-cni: routes in "+args.Netns, err.Error())
	}
	res := &current.Result{
		CNIVersion: current.ImplementedSpecVersion,
		Interfaces: []*current.Interface{{Name: child.Name, Mac: child.LinkAddr, Mtu: child.MTU, Sandbox: args.Netns}},
		Routes:     addrs.Routes,
		DNS:        addrs.DNS,
	}
	for _, a := range addrs.IPs {
		c := *a
		c.Interface = current.Int(0)
		res.IPs = append(res.IPs, &c)
	}
	if len(res.DNS.Nameservers) == 0 {
		res.DNS = n.DNS
	}
	return types.PrintResult(res, n.CNIVersion)
}

// allocate asks IPAM for the attachment's addresses and keeps them.
func allocate(n *NetConf, args *skel.CmdArgs) (*current.Result, error) {
	if n.IPAM.Type == "" {
		return &current.Result{}, saveState(n, args.ContainerID, args.IfName, &current.Result{})
	}
	r, err := ipam.ExecAdd(n.IPAM.Type, args.StdinData)
	if err != nil {
		return nil, err
	}
	res, err := current.NewResultFromResult(r)
	if err == nil && len(res.IPs) == 0 {
		err = errors.New("IPAM plugin " + n.IPAM.Type + " returned no address")
	}
	if err == nil {
		err = saveState(n, args.ContainerID, args.IfName, res)
	}
	if err != nil {
		_ = ipam.ExecDel(n.IPAM.Type, args.StdinData)
		return nil, types.NewError(types.ErrInternal, "ipoibd-cni: IPAM", err.Error())
	}
	return res, nil
}

// addRoutes adds IPAM's routes through the child (run in the pod).
func addRoutes(ifname string, routes []*types.Route) error {
	link, err := netlinksafe.LinkByName(ifname)
	if err != nil {
		return err
	}
	for _, r := range routes {
		if err := ip.AddRoute(&r.Dst, r.GW, link); err != nil && !os.IsExist(err) {
			return fmt.Errorf("route %v: %w", r, err)
		}
	}
	return nil
}

// Del removes the attachment's child, its addresses and its state; what
// is gone already is no error, so DEL may come any number of times, also
// after the pod's namespace or the daemon is gone.
func Del(args *skel.CmdArgs) error {
	n, err := loadConf(args.StdinData)
	if err != nil {
		return err
	}
	if err := delChild(n.Master, owner(n, args.ContainerID, args.IfName)); err != nil {
		return types.NewError(types.ErrInternal, "ipoibd-cni: removing the child", err.Error())
	}
	if n.IPAM.Type != "" {
		if err := ipam.ExecDel(n.IPAM.Type, args.StdinData); err != nil {
			return err
		}
	}
	if err := removeState(n, args.ContainerID, args.IfName); err != nil {
		return types.NewError(types.ErrIOFailure, "ipoibd-cni: removing the attachment's state", err.Error())
	}
	return nil
}

// Check compares the pod's interface with prevResult: the daemon serves
// the child, and the pod has the link with its MTU, addresses and routes.
func Check(args *skel.CmdArgs) error {
	n, err := loadConf(args.StdinData)
	if err != nil {
		return err
	}
	if err := n.parsePrev(); err != nil {
		return err
	}
	prev, err := current.NewResultFromResult(n.PrevResult)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, "ipoibd-cni: cannot read prevResult", err.Error())
	}
	var want *current.Interface
	for _, i := range prev.Interfaces {
		if i.Name == args.IfName && i.Sandbox == args.Netns {
			want = i
		}
	}
	if want == nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "ipoibd-cni: prevResult has no interface "+args.IfName+" in "+args.Netns, "")
	}
	if n.IPAM.Type != "" {
		if err := ipam.ExecCheck(n.IPAM.Type, args.StdinData); err != nil {
			return err
		}
	}
	parent, err := show(n.Master)
	if err != nil {
		return daemonDown(n, err)
	}
	who := owner(n, args.ContainerID, args.IfName)
	found := false
	for _, c := range parent.Children {
		found = found || c.Owner == who
	}
	if !found {
		return types.NewError(ErrChildMissing, "ipoibd-cni: ipoibd of "+n.Master+" serves no interface for "+who+" (did it restart? ADD again makes it anew)", "")
	}
	err = ns.WithNetNSPath(args.Netns, func(ns.NetNS) error {
		link, err := netlinksafe.LinkByName(args.IfName)
		if err != nil {
			return fmt.Errorf("no link %s: %w", args.IfName, err)
		}
		if want.Mtu != 0 && link.Attrs().MTU != want.Mtu {
			return fmt.Errorf("%s has MTU %d, not %d", args.IfName, link.Attrs().MTU, want.Mtu)
		}
		if err := ip.ValidateExpectedInterfaceIPs(args.IfName, prev.IPs); err != nil {
			return err
		}
		return ip.ValidateExpectedRoute(prev.Routes)
	})
	if err != nil {
		return types.NewError(types.ErrInternal, "ipoibd-cni: the pod's interface differs from the result", err.Error())
	}
	return nil
}

// GC removes the children, addresses and state of this network's
// attachments that the runtime no longer lists as valid.
func GC(args *skel.CmdArgs) error {
	n, err := loadConf(args.StdinData)
	if err != nil {
		return err
	}
	valid := map[string]bool{}
	for _, a := range n.ValidAttachments {
		valid[owner(n, a.ContainerID, a.IfName)] = true
	}
	var errs []error
	parent, err := show(n.Master)
	switch {
	case errors.Is(err, errNoDaemon): // its children went with it
	case err != nil:
		errs = append(errs, err)
	default:
		for _, c := range parent.Children {
			if strings.HasPrefix(c.Owner, ownerPrefix(n)) && !valid[c.Owner] {
				errs = append(errs, delChild(n.Master, c.Owner))
			}
		}
	}
	kept, err := keptAttachments(n)
	errs = append(errs, err)
	for _, a := range kept {
		if !valid[owner(n, a[0], a[1])] {
			errs = append(errs, removeState(n, a[0], a[1]))
		}
	}
	if n.IPAM.Type != "" {
		errs = append(errs, invoke.DelegateGC(context.TODO(), n.IPAM.Type, args.StdinData, nil))
	}
	if err := errors.Join(errs...); err != nil {
		return types.NewError(types.ErrInternal, "ipoibd-cni: GC", err.Error())
	}
	return nil
}

// Status says whether the plugin can ADD now: the master's daemon
// answers, and so does IPAM.
func Status(args *skel.CmdArgs) error {
	n, err := loadConf(args.StdinData)
	if err != nil {
		return err
	}
	if _, err := show(n.Master); err != nil {
		return types.NewError(types.ErrPluginNotAvailable, "ipoibd-cni: no ipoibd serves "+n.Master, err.Error())
	}
	if n.IPAM.Type != "" {
		return ipam.ExecStatus(n.IPAM.Type, args.StdinData)
	}
	return nil
}
