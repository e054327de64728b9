//go:build !race

package ipoib

const raceEnabled = false
