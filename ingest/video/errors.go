package video

import "errors"

// Sentinel errors. Callers branch on them with errors.Is.
var (
	// ErrConfig reports an invalid configuration; the wrapped message names the field.
	ErrConfig = errors.New("video: invalid config")
	// ErrMalformed reports an RTP, RTCP or payload that cannot be parsed.
	ErrMalformed = errors.New("video: malformed packet")
	// ErrUnsupported reports a valid but unsupported packetization (STAP-B, MTAP, FU-B, PACI).
	ErrUnsupported = errors.New("video: unsupported packetization")
	// ErrFragment reports a fragmentation unit out of order (middle or end without start).
	ErrFragment = errors.New("video: fragment without start")
	// ErrChunk reports a stored chunk whose headers do not match its payload.
	ErrChunk = errors.New("video: malformed chunk")
	// ErrRedirects reports an RTSP source that redirected more often than
	// one connection attempt follows (maxRedirects).
	ErrRedirects = errors.New("video: too many RTSP redirects")
	// ErrClosed is returned by a second Run (an Ingest runs once).
	ErrClosed = errors.New("video: ingest closed")
)
