package unpack

import (
	"errors"
	"fmt"
)

var (
	// ErrConfig is returned for invalid options.
	ErrConfig = errors.New("unpack: invalid configuration")
	// ErrCursorLost is returned when the derived stream's last message is
	// gone (deleted, purged or aged out) while its last sequence is not 0:
	// where to resume cannot be known.
	ErrCursorLost = errors.New("unpack: derived stream lost its last message (the cursor)")
	// ErrBadCursor is returned when the derived stream's last message
	// lacks a valid Edge-Source-Seq or Edge-Source-Index (something else
	// writes the derived stream).
	ErrBadCursor = errors.New("unpack: derived stream's last message is not the unpacker's")
	// ErrFenced is returned by a session whose publish found the derived
	// stream moved by another writer (another unpacker instance).
	ErrFenced = errors.New("unpack: fenced by another unpacker")
	// ErrDerivedMisconfigured is returned when the derived stream exists
	// with subjects that do not include the unpacker's.
	ErrDerivedMisconfigured = errors.New("unpack: derived stream misconfigured")
	// ErrUndecodable is the error of a source message the unpacker cannot
	// decode (a pack of a newer version, a failed checksum): it stops
	// there, its cursor kept, until the operator skips that sequence
	// (Options.Skip, `central unpack --skip SEQ`).
	ErrUndecodable = errors.New("unpack: a source message does not decode")
)

// undecodableError is ErrUndecodable at one source message.
type undecodableError struct {
	seq     uint64
	subject string
	err     error
}

func (e *undecodableError) Error() string {
	return fmt.Sprintf("%v: source seq %d (%s): %v", ErrUndecodable, e.seq, e.subject, e.err)
}

func (e *undecodableError) Unwrap() []error { return []error{ErrUndecodable, e.err} }
