package flight

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// CertificateName is the certificate attachment's name in a record.
const CertificateName = "certificate.json"

// Certificate statuses.
const (
	StatusComplete   = "complete"
	StatusIncomplete = "incomplete"
)

// Certificate says what a record holds and proves it complete (or says
// why it is not). It is signed by the centre's key: Signature is the
// Ed25519 signature of the certificate's JSON with Signature empty.
type Certificate struct {
	Version int `json:"version"`
	// Status is "complete" when the flight's end is below every involved
	// stream's committed watermark, the stream's transactions are
	// consecutive and every missing offset is covered by a loss record;
	// else "incomplete", with Reasons.
	Status  string   `json:"status"`
	Reasons []string `json:"reasons,omitempty"`
	Flight  Flight   `json:"flight"`
	// Streams are the central streams read, each with the committed cuts
	// that cover the flight and its committed watermark.
	Streams []StreamReport `json:"streams"`
	// Keys are per stream and routing key: event count and first/last
	// positions.
	Keys []KeyReport `json:"keys"`
	// Gaps are every gap marker in the flight.
	Gaps []Gap `json:"gaps"`
	// Channels count the messages per topic.
	Channels []ChannelCount `json:"channels"`
	// Events and Chain are the number of entries and the head of the hash
	// chain over them (hex).
	Events int    `json:"events"`
	Chain  string `json:"chain"`
	// CreatedNs is when the record was written (the centre's tool clock).
	CreatedNs int64 `json:"created_ns"`
	// KeyID names the signing key: the first 8 bytes of SHA-256 of the
	// public key, hex. PublicKey is the key (base64).
	KeyID     string `json:"key_id"`
	PublicKey string `json:"public_key"`
	Signature string `json:"signature"`
}

// KeyReport is what the record holds of one routing key of one stream.
type KeyReport struct {
	Stream string `json:"stream"`
	Key    string `json:"routing_key"`
	Events int    `json:"events"`
	First  string `json:"first"`
	Last   string `json:"last"`
}

// Sidecar is the certificate file beside a record (FILE.cert.json): the
// certificate as attached, the record's SHA-256 and a signature over both.
type Sidecar struct {
	Certificate Certificate `json:"certificate"`
	MCAPSHA256  string      `json:"mcap_sha256"`
	// FileSignature signs sidecarMessage(MCAPSHA256, Certificate.Signature).
	FileSignature string `json:"file_signature"`
}

// KeyID is a public key's id: the first 8 bytes of its SHA-256, hex.
func KeyID(pub ed25519.PublicKey) string {
	h := sha256.Sum256(pub)
	return hex.EncodeToString(h[:8])
}

// signedBytes is what a certificate's signature covers.
func (c Certificate) signedBytes() ([]byte, error) {
	c.Signature = ""
	return json.Marshal(c)
}

// sign fills KeyID, PublicKey and Signature.
func (c *Certificate) sign(key ed25519.PrivateKey) error {
	pub := key.Public().(ed25519.PublicKey)
	c.KeyID, c.PublicKey = KeyID(pub), base64.StdEncoding.EncodeToString(pub)
	b, err := c.signedBytes()
	if err != nil {
		return err
	}
	c.Signature = base64.StdEncoding.EncodeToString(ed25519.Sign(key, b))
	return nil
}

// checkSignature checks the certificate's signature with its own public
// key and, when trusted is not empty, that the key is one of them.
func (c Certificate) checkSignature(trusted []ed25519.PublicKey) error {
	pub, err := base64.StdEncoding.DecodeString(c.PublicKey)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("the certificate's public key is not an Ed25519 key")
	}
	if KeyID(pub) != c.KeyID {
		return fmt.Errorf("the certificate's key id %s is not its public key's (%s)", c.KeyID, KeyID(pub))
	}
	sig, err := base64.StdEncoding.DecodeString(c.Signature)
	if err != nil {
		return fmt.Errorf("the certificate's signature is not base64")
	}
	b, err := c.signedBytes()
	if err != nil {
		return err
	}
	if !ed25519.Verify(pub, b, sig) {
		return fmt.Errorf("the certificate's signature does not match its content (key %s)", c.KeyID)
	}
	if len(trusted) == 0 {
		return nil
	}
	var ids []string
	for _, t := range trusted {
		if KeyID(t) == c.KeyID {
			return nil
		}
		ids = append(ids, KeyID(t))
	}
	return fmt.Errorf("signed by key %s, which is not a trusted key (%v)", c.KeyID, ids)
}

// sidecarMessage is what a sidecar's file signature covers.
func sidecarMessage(fileSHA, certSig string) []byte {
	return []byte("edge-agent flight record v1\n" + fileSHA + "\n" + certSig + "\n")
}

// NewSidecar makes the certificate file for a record with SHA-256 sum.
func NewSidecar(c Certificate, sum [32]byte, key ed25519.PrivateKey) Sidecar {
	h := hex.EncodeToString(sum[:])
	return Sidecar{Certificate: c, MCAPSHA256: h,
		FileSignature: base64.StdEncoding.EncodeToString(ed25519.Sign(key, sidecarMessage(h, c.Signature)))}
}
