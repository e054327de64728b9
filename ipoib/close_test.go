package ipoib

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib/ibtest"
	"github.com/ipoibd/ipoibd/netdev/netdevtest"
)

// An interface closed without ever being started (its owner failed half
// way, e.g. its control socket was taken) closes at once: no control
// goroutine is there to ask.
func TestCloseWithoutStart(t *testing.T) {
	dev, err := ibtest.NewFabric().Open(ibtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	i, err := newOnFake(netdevtest.New(), Config{Name: "ib0", Device: dev, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { i.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close of an interface never started hangs")
	}
}
