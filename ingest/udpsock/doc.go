// Package udpsock tunes the UDP sockets of the intakes (video's RTP and
// RTCP, MAVLink's): a receive buffer as large as the kernel grants, and
// the kernel's count of datagrams it dropped because that buffer was full
// (SO_RXQ_OVFL, Linux), which recvmmsg hands back with every datagram as
// control data:
//
//	cmsghdr: level SOL_SOCKET, type SO_RXQ_OVFL, data: uint32 (native
//	endian) = datagrams the socket dropped since SO_RXQ_OVFL was set
//
// The count is the socket's, cumulative: a reader keeps the last one seen.
// A loss between two reads shows in the next datagram read.
package udpsock
