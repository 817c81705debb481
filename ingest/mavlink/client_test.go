package mavlink

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/edge-agent/edge-agent/internal/testkit"
)

// TestUDPClientEndpoint: as an endpoint of a router's UDP server, the
// intake sends HEARTBEATs (system 254, a GCS) and takes the frames the
// server sends back to it.
func TestUDPClientEndpoint(t *testing.T) {
	srv, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	_, st := openStore(t, t.TempDir())
	cfg := NewDefaultConfig()
	cfg.UDPConnect = []string{srv.LocalAddr().String()}
	cfg.HeartbeatInterval = 50 * time.Millisecond
	in, _ := runIntake(t, cfg, st, nil)
	buf := make([]byte, 512)
	srv.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, client, err := srv.ReadFromUDP(buf)
	if err != nil {
		t.Fatalf("no heartbeat from the intake: %v", err)
	}
	m, err := DefaultDialect().Decode(buf[:n])
	if err != nil || m.Name != "HEARTBEAT" || m.SysID != 254 {
		t.Fatalf("the intake sent %+v (%v), want a HEARTBEAT of system 254", m, err)
	}
	w := newWriter(t, false, 8, 1, nil)
	var sent [][]byte
	for i := range 100 {
		f := w.frame(t, sampleMessages(i)[i%5])
		sent = append(sent, f)
		srv.WriteToUDP(f, client)
	}
	testkit.WaitFor(t, 5*time.Second, "frames from the server", func() bool { return in.Stats().Stored == 100 })
	for i, r := range byDrone(t, st)["mavlink-8"] {
		if !bytes.Equal(r.Payload, sent[i]) {
			t.Fatalf("frame %d differs", i)
		}
	}
}

// TestTCPClientEndpoint: dialled to a TCP server (mavlink-router 5760,
// SITL), the intake redials after the server drops it and reads on.
func TestTCPClientEndpoint(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, st := openStore(t, t.TempDir())
	cfg := NewDefaultConfig()
	cfg.UDPListen = ""
	cfg.TCPConnect = []string{ln.Addr().String()}
	in, _ := runIntake(t, cfg, st, nil)
	w := newWriter(t, false, 9, 1, nil)
	total := 0
	for conn := range 3 {
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		for i := range 50 {
			c.Write(w.frame(t, sampleMessages(i)[i%5]))
		}
		total += 50
		testkit.WaitFor(t, 5*time.Second, "frames of connection", func() bool { return in.Stats().Stored == uint64(total) })
		c.Close() // the server drops the intake
		t.Logf("connection %d: %d frames stored", conn, total)
	}
	if s := in.Stats(); s.Connections != 3 || s.ConnectionsLost < 2 {
		t.Fatalf("stats %+v: want 3 connections, 2 or more lost", s)
	}
}
