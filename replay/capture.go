package replay

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Packet is one UDP datagram of a capture.
type Packet struct {
	// Time is the capture timestamp.
	Time time.Time
	// Src and Dst are the UDP endpoints in the capture.
	Src, Dst netip.AddrPort
	// Payload is the UDP payload.
	Payload []byte
	// Kind is what the payload looks like.
	Kind Kind
}

// Kind classifies a UDP payload.
type Kind uint8

const (
	// Other is neither RTP nor RTCP.
	Other Kind = iota
	// RTP is an RTP packet (version 2, at least 12 bytes).
	RTP
	// RTCP is an RTCP packet (version 2, packet type 192-223, RFC 5761).
	RTCP
)

// Classify tells RTP from RTCP by the version and the second byte (RFC 5761 §4).
func Classify(b []byte) Kind {
	if len(b) < 8 || b[0]>>6 != 2 {
		return Other
	}
	if b[1] >= 192 && b[1] <= 223 {
		return RTCP
	}
	if len(b) < 12 {
		return Other
	}
	return RTP
}

// packetSource is what pcapgo's two readers have in common.
type packetSource interface {
	ReadPacketData() ([]byte, gopacket.CaptureInfo, error)
	LinkType() layers.LinkType
}

// Read reads every UDP datagram of a pcap or pcapng stream; skipped counts
// the records that were not UDP over IP.
func Read(r io.Reader) (pkts []Packet, skipped int, err error) {
	br := bufio.NewReader(r)
	magic, err := br.Peek(4)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	var src packetSource
	if bytes.Equal(magic, []byte{0x0a, 0x0d, 0x0d, 0x0a}) {
		src, err = pcapgo.NewNgReader(br, pcapgo.DefaultNgReaderOptions)
	} else {
		src, err = pcapgo.NewReader(br)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	first := src.LinkType()
	switch first {
	case layers.LinkTypeEthernet, layers.LinkTypeLinuxSLL, layers.LinkTypeLinuxSLL2,
		layers.LinkTypeRaw, layers.LinkTypeIPv4, layers.LinkTypeIPv6, layers.LinkTypeNull, layers.LinkTypeLoop:
	default:
		return nil, 0, fmt.Errorf("%w: link type %s", ErrFormat, first)
	}
	for {
		data, ci, err := src.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return pkts, skipped, nil
		}
		if err != nil {
			return pkts, skipped, fmt.Errorf("replay: reading capture: %w", err)
		}
		lt := first
		if ng, ok := src.(*pcapgo.NgReader); ok && ci.InterfaceIndex >= 0 {
			if intf, err := ng.Interface(ci.InterfaceIndex); err == nil {
				lt = intf.LinkType
			}
		}
		p, ok := decode(data, lt)
		if !ok {
			skipped++
			continue
		}
		p.Time = ci.Timestamp
		pkts = append(pkts, p)
	}
}

// ReadFile reads a capture file (see Read).
func ReadFile(path string) ([]Packet, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	return Read(f)
}

// decode extracts a UDP datagram from one link-layer frame.
func decode(data []byte, lt layers.LinkType) (Packet, bool) {
	var first gopacket.Decoder = lt
	if lt == layers.LinkTypeRaw || lt == layers.LinkTypeIPv4 || lt == layers.LinkTypeIPv6 {
		if len(data) == 0 {
			return Packet{}, false
		}
		if data[0]>>4 == 6 {
			first = layers.LayerTypeIPv6
		} else {
			first = layers.LayerTypeIPv4
		}
	}
	pk := gopacket.NewPacket(data, first, gopacket.DecodeOptions{Lazy: true, NoCopy: true})
	udp, _ := pk.Layer(layers.LayerTypeUDP).(*layers.UDP)
	if udp == nil {
		return Packet{}, false
	}
	var sa, da netip.Addr
	switch ip := pk.NetworkLayer().(type) {
	case *layers.IPv4:
		if ip.Flags&layers.IPv4MoreFragments != 0 || ip.FragOffset != 0 {
			return Packet{}, false
		}
		sa, _ = netip.AddrFromSlice(ip.SrcIP.To4())
		da, _ = netip.AddrFromSlice(ip.DstIP.To4())
	case *layers.IPv6:
		sa, _ = netip.AddrFromSlice(ip.SrcIP)
		da, _ = netip.AddrFromSlice(ip.DstIP)
	default:
		return Packet{}, false
	}
	payload := append([]byte(nil), udp.Payload...)
	return Packet{
		Src:     netip.AddrPortFrom(sa, uint16(udp.SrcPort)),
		Dst:     netip.AddrPortFrom(da, uint16(udp.DstPort)),
		Payload: payload,
		Kind:    Classify(payload),
	}, true
}
