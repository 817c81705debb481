// Package replay sends the RTP and RTCP packets of a recorded capture
// (pcap or pcapng) to an agent, as a drone would: with the capture's
// original timing (scaled by a speed factor) or as fast as possible.
//
// A capture is read whole (ReadFile) into Packets: UDP datagrams over IPv4
// or IPv6 on Ethernet, Linux cooked (SLL, SLL2), raw IP or BSD loopback
// links. The RTP stream is the UDP destination port that carries the most
// RTP; RTCP is what goes to that port (muxed, RFC 5761) or to port+1, and
// is sent to the same relation of ports at the target. Everything else in
// the capture is skipped and counted.
//
// Send and SendPackets can rewrite the SSRC of every packet (RTP header and
// RTCP sender SSRC), so one capture acts as several drones, and can send
// RTCP muxed on the RTP port.
package replay
