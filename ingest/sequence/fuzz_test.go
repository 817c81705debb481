package sequence

import (
	"encoding/binary"
	"testing"
)

// FuzzWindow runs an operation list from the fuzzer's bytes through the
// Window and the reference (reference_test.go): they must agree on every
// answer. The first byte picks the config; then 3 bytes an operation:
// its kind and a 16-bit number.
func FuzzWindow(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 1, 0, 0, 2, 0, 0, 3, 0, 0, 2, 0, 0, 3, 0, 0, 4})   // issue 37 case 1
	f.Add([]byte{0, 0, 0, 0, 0, 0, 1, 0, 0, 3, 0, 0, 2, 0, 0, 4, 0, 0, 5})            // case 2
	f.Add([]byte{1, 0, 0xff, 0xf0, 0, 0x00, 0x10, 0, 0x80, 0, 0, 0x80, 1, 5, 0, 0})   // RTP wrap, far jumps
	f.Add([]byte{3, 0, 0, 1, 0, 0, 9, 7, 0, 3, 8, 0, 1, 9, 0, 0, 10, 0, 2, 11, 0, 5}) // small window, probation, tags
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		p := newPair(t, modelConfigs[int(b[0])%len(modelConfigs)])
		for b = b[1:]; len(b) >= 3; b = b[3:] {
			seq := uint32(binary.BigEndian.Uint16(b[1:]))
			switch op := b[0]; {
			case op < 200:
				p.observe(seq, uint32(op%4))
			case op < 210:
				p.giveUp(seq)
			case op < 220:
				p.giveUpBefore(seq)
			case op < 230:
				p.flush()
			case op < 240:
				p.afterDrops(int(seq))
			case op < 245:
				p.reset()
			default:
				p.observe(seq, 0)
			}
		}
	})
}
