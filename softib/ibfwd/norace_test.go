//go:build !race

package ibfwd

const raceEnabled = false
