package mavlink

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"github.com/bluenviron/gomavlib/v3/pkg/frame"
	"github.com/bluenviron/gomavlib/v3/pkg/message"
)

// signer checks MAVLink 2 signatures with one secret key. The key lives
// only here: it is never logged, formatted or returned.
type signer struct {
	key     [32]byte
	require bool
}

// String hides the key from any %v of a struct holding a signer.
func (s *signer) String() string { return "mavlink signer (key hidden)" }

// loadSigner reads the key of c; nil without a key.
func loadSigner(c SigningConfig) (*signer, error) {
	var text string
	switch {
	case c.KeyFile != "":
		b, err := os.ReadFile(c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: signing.key_file: %w", ErrSigningKey, err)
		}
		text = string(b)
	case c.KeyEnv != "":
		v, ok := os.LookupEnv(c.KeyEnv)
		if !ok {
			return nil, fmt.Errorf("%w: signing.key_env: %s is not set", ErrSigningKey, c.KeyEnv)
		}
		text = v
	default:
		return nil, nil
	}
	key, err := parseKey(text)
	if err != nil {
		return nil, err
	}
	return &signer{key: key, require: c.Require}, nil
}

// ReadSigningKey reads a key file as signing.key_file does (64 hex
// digits, or a passphrase whose SHA-256 is the key): for senders such as
// the simulator.
func ReadSigningKey(path string) ([32]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return [32]byte{}, fmt.Errorf("%w: %w", ErrSigningKey, err)
	}
	return parseKey(string(b))
}

// parseKey reads 64 hex digits as the key, or any other text as a
// passphrase whose SHA-256 is the key (MAVProxy's `signing setup`).
func parseKey(text string) ([32]byte, error) {
	var key [32]byte
	text = strings.TrimSpace(text)
	if text == "" {
		return key, fmt.Errorf("%w: the key is empty", ErrSigningKey)
	}
	if len(text) == 64 {
		if b, err := hex.DecodeString(text); err == nil {
			copy(key[:], b)
			return key, nil
		}
	}
	return sha256.Sum256([]byte(text)), nil
}

// verify reports whether f's signature is f's under the key. The
// signature is gomavlib's (frame.V2Frame.GenerateSignature) over the
// frame's fields as received, which are its bytes: the header, payload
// and checksum are taken from Raw as they are, nothing re-encoded.
// gomavlib's frame.Reader is not used for the check: it reads frames
// through its own parser (frame.go says why the intake has its own), and
// its replay rule is not MAVLink's (replay.go).
func (s *signer) verify(f *Frame) bool {
	_, link, ts, sig := f.signatureParts()
	n := len(f.Raw) - signatureLen
	fr := frame.V2Frame{IncompatibilityFlag: f.Raw[2], CompatibilityFlag: f.Raw[3], SequenceNumber: f.Seq,
		SystemID: f.SysID, ComponentID: f.CompID, Message: &message.MessageRaw{ID: f.MsgID, Payload: f.Payload},
		Checksum: binary.LittleEndian.Uint16(f.Raw[n-2:]), SignatureLinkID: link, SignatureTimestamp: ts}
	want := fr.GenerateSignature((*frame.V2Key)(&s.key))
	return subtle.ConstantTimeCompare(want[:], sig) == 1
}
