// The bench's TUN relay limit (scripts/bench.sh builds it): a module of its
// own, so that the daemon's module does not grow a dependency for it.
module github.com/ipoibd/ipoibd/bench/relay

go 1.26.0

require golang.org/x/sys v0.49.0
