// Command ipoibd-cni is ipoibd's CNI plugin: a pod's IPoIB interface, a
// P_Key child made by the node's ipoibd in the pod's network namespace.
// Install it in the runtime's CNI bin directory (/opt/cni/bin); see the
// README's Kubernetes section and package cni.
package main

import (
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/ipoibd/ipoibd/cni"
)

func main() {
	skel.PluginMainFuncs(cni.Funcs, cni.Versions, "ipoibd-cni: a pod's IPoIB interface from the node's ipoibd")
}
