//go:build race

package ibfwd

// raceEnabled: under the race detector sync.Pool drops what it is given
// and the detector allocates on its own, so allocation counts mean nothing.
const raceEnabled = true
