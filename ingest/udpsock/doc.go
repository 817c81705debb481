// Package udpsock reads and tunes the UDP sockets of the intakes (video's
// RTP and RTCP, MAVLink's): Reader reads them in batches (recvmmsg), one
// loop for both; Tune asks for a receive buffer as large as the kernel
// grants and for the kernel's count of datagrams it dropped because that
// buffer was full (SO_RXQ_OVFL, Linux), which recvmmsg hands back with
// every datagram as control data (KernelDrops reads it):
//
//	cmsghdr: level SOL_SOCKET, type SO_RXQ_OVFL, data: uint32 (native
//	endian) = datagrams the socket dropped since SO_RXQ_OVFL was set
//
// The count is the socket's, cumulative: a reader keeps the last one seen.
// A loss between two reads shows in the next datagram read.
package udpsock
