package mavlink

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"testing"

	"github.com/bluenviron/gomavlib/v3/pkg/dialects/common"
	"github.com/bluenviron/gomavlib/v3/pkg/frame"
	"github.com/bluenviron/gomavlib/v3/pkg/x25"
)

// TestSplitGomavlibFrames: frames written by gomavlib (v1, v2, v2 signed)
// split back byte for byte, with their header fields, also run together
// and with garbage between them.
func TestSplitGomavlibFrames(t *testing.T) {
	d := DefaultDialect()
	key := frame.NewV2Key(bytes.Repeat([]byte{7}, 32))
	for _, tc := range []struct {
		name string
		v1   bool
		key  *frame.V2Key
	}{{"v1", true, nil}, {"v2", false, nil}, {"v2-signed", false, key}} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWriter(t, tc.v1, 7, 1, tc.key)
			var all, stream []byte
			var frames [][]byte
			for i := range 20 {
				for _, m := range sampleMessages(i) {
					if tc.v1 && m.GetID() > 255 {
						continue
					}
					f := w.frame(t, m)
					frames = append(frames, f)
					all = append(all, f...)
					stream = append(append(stream, 0xFE, 0xFD, 0x00, 0x55), f...) // garbage, including magics
				}
			}
			for _, b := range [][]byte{all, stream} {
				var got [][]byte
				for i := 0; i < len(b); {
					f, n, res := split(b[i:], d)
					if res != splitFrame {
						i++
						continue
					}
					if f.SysID != 7 || f.CompID != 1 || f.V2 == tc.v1 || f.Signed != (tc.key != nil) {
						t.Fatalf("frame %d: header %+v", len(got), f)
					}
					got = append(got, f.Raw)
					i += n
				}
				if len(got) != len(frames) {
					t.Fatalf("%d frames split, want %d", len(got), len(frames))
				}
				for i := range got {
					if !bytes.Equal(got[i], frames[i]) {
						t.Fatalf("frame %d: % x, want % x", i, got[i], frames[i])
					}
				}
			}
		})
	}
}

// TestSplitRefuses: a wrong checksum, an unknown message, an unknown
// incompatibility flag; and a cut frame waits for more.
func TestSplitRefuses(t *testing.T) {
	d := DefaultDialect()
	f := newWriter(t, false, 1, 1, nil).frame(t, sampleMessages(0)[1])
	bad := append([]byte(nil), f...)
	bad[len(bad)-1] ^= 0xFF
	if _, _, res := split(bad, d); res != splitBadCRC {
		t.Errorf("wrong checksum: %v", res)
	}
	unknown := append([]byte(nil), f...)
	unknown[7], unknown[8], unknown[9] = 0xEE, 0xEE, 0xEE
	if _, _, res := split(unknown, d); res != splitUnknown {
		t.Errorf("unknown message: %v", res)
	}
	flag := append([]byte(nil), f...)
	flag[2] = 0x02
	if _, _, res := split(flag, d); res != splitGarbage {
		t.Errorf("unknown incompatibility flag: %v", res)
	}
	for i := range len(f) {
		if _, _, res := split(f[:i], d); res != splitShort {
			t.Fatalf("cut at %d: %v", i, res)
		}
	}
}

// TestSignatureAgainstGomavlib: gomavlib's signed frames verify with the
// key and not with another; a changed byte fails.
func TestSignatureAgainstGomavlib(t *testing.T) {
	key, _ := parseKey("correct horse battery staple")
	other, _ := parseKey("wrong")
	w := newWriter(t, false, 3, 1, frame.NewV2Key(key[:]))
	raw := w.frame(t, sampleMessages(1)[2])
	f, _, res := split(raw, DefaultDialect())
	if res != splitFrame {
		t.Fatal(res)
	}
	if !(&signer{key: key}).verify(&f) {
		t.Fatal("gomavlib's signature does not verify")
	}
	if (&signer{key: other}).verify(&f) {
		t.Fatal("another key verifies")
	}
	raw[len(raw)-1] ^= 1
	f, _, _ = split(raw, DefaultDialect())
	if (&signer{key: key}).verify(&f) {
		t.Fatal("a changed signature verifies")
	}
}

// TestSignIsGomavlibs: the intake's signature of a frame's bytes is
// gomavlib's GenerateSignature of its fields (signer.sign says why the
// intake does not call it), for every sample message, system id, link,
// timestamp and compatibility flag; and gomavlib's signed frames verify.
func TestSignIsGomavlibs(t *testing.T) {
	for _, text := range []string{"correct horse battery staple", "another key"} {
		key, _ := parseKey(text)
		s := &signer{key: key}
		for i, msg := range sampleMessages(7) {
			mp := DefaultDialect().rw.GetMessage(msg.GetID())
			for _, link := range []uint8{0, 1, 255} {
				fr := &frame.V2Frame{IncompatibilityFlag: frame.V2FlagSigned, CompatibilityFlag: uint8(i % 2), SequenceNumber: uint8(i * 37),
					SystemID: uint8(1 + i), ComponentID: 190, Message: mp.Write(msg, true), SignatureLinkID: link,
					SignatureTimestamp: uint64(1)<<47 + uint64(i)*1e6 + uint64(link)}
				fr.Checksum = fr.GenerateChecksum(mp.CRCExtra())
				fr.Signature = fr.GenerateSignature(frame.NewV2Key(key[:]))
				f, _, res := split(gomavlibBytes(t, fr), DefaultDialect())
				if res != splitFrame {
					t.Fatal(res)
				}
				signed, _, _, _ := f.signatureParts()
				if got := s.sign(signed); got != [signatureBytes]byte(fr.Signature[:]) {
					t.Fatalf("%T link %d: sign %x, gomavlib %x", msg, link, got, fr.Signature[:])
				}
				if !s.verify(&f) {
					t.Fatalf("%T link %d: gomavlib's signature does not verify", msg, link)
				}
			}
		}
	}
}

// TestDecode: a frame decodes to its MAVLink name and fields.
func TestDecode(t *testing.T) {
	d := DefaultDialect()
	raw := newWriter(t, false, 9, 1, nil).frame(t, sampleMessages(3)[2])
	m, err := d.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "GLOBAL_POSITION_INT" || m.SysID != 9 || m.Version != 2 || m.Fields["lat"] != int32(473977423) || m.Fields["time_boot_ms"] != uint32(1060) {
		t.Fatalf("decoded %+v", m)
	}
	if _, err := d.Decode(raw[:len(raw)-1]); err == nil {
		t.Fatal("a cut frame decodes")
	}
}

func FuzzSplit(f *testing.F) {
	w := newWriter(f, false, 1, 1, frame.NewV2Key(make([]byte, 32)))
	for _, m := range sampleMessages(1) {
		f.Add(w.frame(f, m))
	}
	f.Add(newWriter(f, true, 1, 1, nil).frame(f, sampleMessages(1)[0]))
	f.Add([]byte{0xFD, 0xFF, 1, 0, 0, 1, 1, 0, 0, 0})
	d := DefaultDialect()
	f.Fuzz(func(t *testing.T, b []byte) {
		for i := 0; i < len(b); {
			fr, n, res := split(b[i:], d)
			if res != splitFrame {
				i++
				continue
			}
			if n != len(fr.Raw) || n > maxFrameLen || n < minFrameLen || !bytes.Equal(fr.Raw, b[i:i+n]) {
				t.Fatalf("frame of %d bytes at %d: raw %d", n, i, len(fr.Raw))
			}
			if fr.Signed {
				(&signer{}).verify(&fr)
			}
			if m, err := d.Decode(fr.Raw); err == nil {
				if m.ID != fr.MsgID {
					t.Fatalf("decoded id %d, frame %d", m.ID, fr.MsgID)
				}
				if _, err := json.Marshal(m); err != nil { // edge-agent read prints it
					t.Fatalf("decoded message does not print as JSON: %v", err)
				}
			}
			i += n
		}
	})
}

func FuzzParseKey(f *testing.F) {
	f.Add("00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff")
	f.Add("passphrase")
	f.Fuzz(func(t *testing.T, s string) {
		parseKey(s)
	})
}

// TestGomavlibReaderReencodes is why split is the intake's own (frame.go):
// a STATUSTEXT with bytes after its string's end, as some senders write
// it, is read by gomavlib's frame.Reader with a dialect and re-encoded —
// written back, the bytes differ (junk zeroed, checksum recomputed) —
// while split takes it byte for byte.
func TestGomavlibReaderReencodes(t *testing.T) {
	raw := newWriter(t, true, 4, 1, nil).frame(t, &common.MessageStatustext{Severity: 6, Text: "hi"})
	raw[headerV1+1+3] = 'X' // after "hi\x00"
	mp := DefaultDialect().rw.GetMessage(253)
	h := x25.New()
	h.Write(raw[1 : len(raw)-2])
	h.Write([]byte{mp.CRCExtra()})
	binary.LittleEndian.PutUint16(raw[len(raw)-2:], h.Sum16())
	if f, n, res := split(raw, DefaultDialect()); res != splitFrame || n != len(raw) || !bytes.Equal(f.Raw, raw) {
		t.Fatalf("split: %v, %d bytes", res, n)
	}
	r := &frame.Reader{BufByteReader: bufio.NewReader(bytes.NewReader(raw)), DialectRW: DefaultDialect().rw}
	if err := r.Initialize(); err != nil {
		t.Fatal(err)
	}
	fr, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	out := gomavlibBytes(t, fr)
	if bytes.Equal(out, raw) {
		t.Fatal("gomavlib's reader kept the bytes: split could be replaced by it")
	}
	t.Logf("received % x\ngomavlib  % x", raw, out)
}
