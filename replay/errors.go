package replay

import "errors"

var (
	// ErrFormat reports a file that is neither pcap nor pcapng, or an
	// unsupported link type.
	ErrFormat = errors.New("replay: unsupported capture format")
	// ErrNoRTP reports a capture without RTP packets.
	ErrNoRTP = errors.New("replay: no rtp in capture")
	// ErrTarget reports a bad --to address.
	ErrTarget = errors.New("replay: bad target address")
)
