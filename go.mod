module github.com/ipoibd/ipoibd

go 1.26.0

require (
	github.com/songgao/water v0.0.0-20200317203138-2b4b6d7c09d8
	github.com/spf13/pflag v1.1.0
	github.com/vishvananda/netlink v1.3.1
	golang.org/x/sys v0.49.0
)

require github.com/vishvananda/netns v0.0.5
