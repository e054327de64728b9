package main

// Developer aids the environment turns on; no flag, no man page.

import (
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"time"
)

// startProfiling starts what the environment asks for, each until the
// daemon exits: a CPU profile (IPOIBD_CPUPROFILE=path) and the runtime's
// execution trace (IPOIBD_TRACE=path: scheduling latency on the datapath)
// and heap profiles (IPOIBD_HEAPPROFILE=path: rewritten every
// heapProfileEvery and at exit, so that a soak can compare them over time
// and a daemon killed with SIGKILL still leaves its last one).
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
	}{{"IPOIBD_CPUPROFILE", startCPUProfile}, {"IPOIBD_TRACE", startTrace}, {"IPOIBD_HEAPPROFILE", startHeapProfile}} {
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

// heapProfileEvery: how often IPOIBD_HEAPPROFILE's file is rewritten.
const heapProfileEvery = 10 * time.Second

func startHeapProfile(path string) (func(), error) {
	if err := writeHeapProfile(path); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(heapProfileEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = writeHeapProfile(path)
			}
		}
	}()
	return func() { close(done); <-stopped; _ = writeHeapProfile(path) }, nil
}

// writeHeapProfile replaces path with the heap profile as of now, whole:
// written beside it and renamed, so a reader never sees half a profile.
// The runtime's heap profile is as of the last garbage collection, which
// an idle daemon may have run long ago: one runs first.
func writeHeapProfile(path string) error {
	runtime.GC()
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}
