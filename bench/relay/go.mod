// The bench's TUN relay limit (scripts/bench.sh builds it): a module of its
// own, so that the daemon's module does not grow a dependency for it.
module github.com/ipoibd/ipoibd/bench/relay

go 1.26.8

require golang.org/x/sys v0.49.0

// -conform uses the daemon's own checksum code.
require github.com/ipoibd/ipoibd v0.0.0

replace github.com/ipoibd/ipoibd => ../..
