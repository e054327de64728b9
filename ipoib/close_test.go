package ipoib

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/internal/testnet"
	"github.com/ipoibd/ipoibd/softib"
)

// An interface closed without ever being started (its owner failed half
// way, e.g. its control socket was taken) closes at once: no control
// goroutine is there to ask.
func TestCloseWithoutStart(t *testing.T) {
	n := testnet.New(t, testnet.Config{Hosts: 1})
	n.In(0, func() {
		dev, err := softib.Open(softib.Config{Addr: n.Hosts[0].Addr})
		if err != nil {
			t.Fatal(err)
		}
		defer dev.Close()
		i, err := New(Config{Name: "ib0", Device: dev, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
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
	})
}
