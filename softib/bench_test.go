package softib

import (
	"net"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testnet"
	"github.com/ipoibd/ipoibd/softib/wire"
)

// BenchmarkRC64KNetns moves 64 KiB RC messages between two namespaces over
// a veth/bridge underlay (MTU 9000, path MTU 4096). Compare with
// BenchmarkRawUDPNetns from the same run: the same bytes as plain 4096-octet
// UDP datagrams, one per syscall, no reliability.
func BenchmarkRC64KNetns(b *testing.B) {
	n := testnet.New(b, testnet.Config{Hosts: 2})
	var ha, hb *host
	n.In(0, func() { ha = newHost(b, n.Hosts[0].Addr.String(), wire.UDPPort) })
	n.In(1, func() { hb = newHost(b, n.Hosts[1].Addr.String(), wire.UDPPort) })
	qa, qb := connect(b, ib.RC, ha, hb, 7, 7)
	const window = 128
	for i := range window {
		qb.PostRecv([]ib.RecvWR{{ID: uint64(i), SGE: hb.slot(i, 65536)}})
	}
	wcs := make([]ib.Completion, 64)
	wr := []ib.SendWR{{}}
	rwr := []ib.RecvWR{{}}
	idle := time.NewTimer(time.Hour) // reused: the loop itself must not allocate
	b.SetBytes(65536)
	b.ReportAllocs()
	b.ResetTimer()
	sent, done, recvd := 0, 0, 0
	for recvd < b.N {
		for sent < b.N && sent-done < window/2 {
			wr[0] = ib.SendWR{ID: uint64(sent), SGE: ha.slot(sent%window, 65536)}
			qa.PostSend(wr)
			sent++
		}
		for k := ha.scq.Poll(wcs); k > 0; k = ha.scq.Poll(wcs) {
			done += k
		}
		for k := hb.rcq.Poll(wcs); k > 0; k = hb.rcq.Poll(wcs) {
			for _, wc := range wcs[:k] {
				rwr[0] = ib.RecvWR{ID: wc.ID, SGE: hb.slot(int(wc.ID)%window, 65536)}
				qb.PostRecv(rwr)
			}
			recvd += k
		}
		if recvd < b.N {
			idle.Reset(time.Second)
			select {
			case <-hb.rcq.Ready():
			case <-ha.scq.Ready():
			case <-idle.C:
			}
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(b.N)*65536*8/b.Elapsed().Seconds()/1e9, "Gbit/s")
}

// BenchmarkRawUDPNetns is the baseline: 4096-octet UDP datagrams blasted
// over the same kind of underlay, one sendto per datagram, counted at the
// receiver.
func BenchmarkRawUDPNetns(b *testing.B) {
	n := testnet.New(b, testnet.Config{Hosts: 2})
	var rx, tx *net.UDPConn
	n.In(1, func() { rx, _ = net.ListenUDP("udp4", &net.UDPAddr{IP: n.Hosts[1].Addr.AsSlice(), Port: 5000}) })
	n.In(0, func() { tx, _ = net.DialUDP("udp4", nil, &net.UDPAddr{IP: n.Hosts[1].Addr.AsSlice(), Port: 5000}) })
	defer rx.Close()
	defer tx.Close()
	rx.SetReadBuffer(8 << 20)
	got := make(chan int)
	go func() {
		buf := make([]byte, 65536)
		total := 0
		for {
			rx.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			k, err := rx.Read(buf)
			if err != nil {
				got <- total
				return
			}
			total += k
		}
	}()
	msg := make([]byte, 4096)
	b.SetBytes(65536)
	b.ResetTimer()
	for range b.N * 16 {
		tx.Write(msg)
	}
	elapsed := b.Elapsed()
	b.StopTimer()
	total := <-got
	b.ReportMetric(float64(total)*8/elapsed.Seconds()/1e9, "Gbit/s-received")
}
