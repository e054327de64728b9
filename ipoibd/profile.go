package main

// Developer aids the environment turns on; no flag, no man page.

import (
	"os"
	"runtime/pprof"
	"runtime/trace"
)

// startProfiling starts what the environment asks for, each until the
// daemon exits: a CPU profile (IPOIBD_CPUPROFILE=path) and the runtime's
// execution trace (IPOIBD_TRACE=path: scheduling latency on the datapath).
// stop ends them, the last started first.
func startProfiling() (stop func(), err error) {
	var stops []func()
	stop = func() {
		for k := len(stops) - 1; k >= 0; k-- {
			stops[k]()
		}
	}
	for _, aid := range []struct {
		env   string
		start func(path string) (func(), error)
	}{{"IPOIBD_CPUPROFILE", startCPUProfile}, {"IPOIBD_TRACE", startTrace}} {
		path := os.Getenv(aid.env)
		if path == "" {
			continue
		}
		s, err := aid.start(path)
		if err != nil {
			stop()
			return nil, err
		}
		stops = append(stops, s)
	}
	return stop, nil
}

func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

func startTrace(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { trace.Stop(); f.Close() }, nil
}
