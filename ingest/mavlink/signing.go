package mavlink

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
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

// verify reports whether f's signature is f's under the key.
func (s *signer) verify(f *Frame) bool {
	signed, _, _, sig := f.signatureParts()
	want := s.sign(signed)
	return subtle.ConstantTimeCompare(want[:], sig) == 1
}

// sign is MAVLink 2's signature of a frame's signed bytes (magic to
// timestamp): the first 6 bytes of SHA-256(key ‖ signed), hashed in one
// pass over a copy on the stack, as received. gomavlib's
// frame.V2Frame.GenerateSignature computes the same
// (TestSignIsGomavlibs checks it on gomavlib's frames) but not from
// the bytes: it rebuilds them field by field from a V2Frame, 14 hash
// writes and 5 allocations a frame, which made a signed frame's path
// 1.2× the one before it (BenchmarkFramePathSigned under callgrind,
// docs/benchmarks/mavlink.md). Its frame.Reader checks signatures too,
// but reads frames through its own parser (frame.go says why the
// intake has its own), and its replay rule is not MAVLink's (replay.go).
func (s *signer) sign(signed []byte) [signatureBytes]byte {
	var buf [len(s.key) + maxFrameLen - signatureBytes]byte
	n := copy(buf[:], s.key[:])
	n += copy(buf[n:], signed)
	sum := sha256.Sum256(buf[:n])
	return [signatureBytes]byte(sum[:signatureBytes])
}
