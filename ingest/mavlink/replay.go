package mavlink

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/edge-agent/edge-agent/localstream"
)

// The MAVLink 2 signing rules (message signing, "accepting incoming
// packets"): a signed frame's timestamp must be newer than the last one
// of its stream — its (system, component, link id) — and a stream not
// seen before is refused when its timestamp is more than a minute behind
// the receiver's clock; the last timestamps are to be kept across
// restarts. replayGuard applies them. gomavlib's frame.Reader cannot:
// it keeps one timestamp per reader (not per stream), accepts a frame up
// to 10 s older than the newest (a replay within that), has no rule for
// a new stream, keeps nothing across restarts, and refuses every
// unsigned frame (signing.require: false takes them). Its signature is
// checked against the intake's (TestSignIsGomavlibs; signer.sign says why
// the intake computes it from the frame's bytes).
//
// The last timestamps live in the intake (not in a drone's slot, which a
// silent drone gives back) and are written to the store in the same
// transaction as the first event of the next group appended
// (localstream.WithMeta on AppendGroupAsync), one metadata key a stream:
//
//	key   "mavlink/signing/" + 6 hex digits: sysid, compid, link id
//	value 8 bytes, big-endian: the newest timestamp accepted (10 µs since 2015-01-01 UTC)
//
// So a stored event's timestamp is never newer than what the store holds
// for its stream: after a SIGKILL the restored timestamps refuse every
// frame stored before it, and a frame taken but not stored (lost with the
// batch) may come once more.

// signingMetaPrefix is the metadata key prefix of the last timestamps.
const signingMetaPrefix = "mavlink/signing/"

// signingEpoch is the zero of signing timestamps, counted in 10 µs.
var signingEpoch = time.Date(2015, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

// newStreamLag is how far behind the receiver's clock the first frame of
// a new stream may be: one minute, in 10 µs.
const newStreamLag = uint64(time.Minute / (10 * time.Microsecond))

// maxSignatureStreams bounds the streams whose last timestamp is kept; a
// new stream beyond it is refused (only holders of the key make streams).
const maxSignatureStreams = 4096

// replayGuard is the signing streams' last timestamps. Intake.mu guards it.
type replayGuard struct {
	// last is each stream's state: one map access a signed frame (a map
	// of timestamps and a set of changed streams took three).
	last  map[uint32]*signingState
	dirty []uint32 // streams changed since their last write to the store
}

// signingState is one signing stream's.
type signingState struct {
	ts    uint64 // the newest timestamp accepted
	dirty bool   // listed in replayGuard.dirty
}

func signingStream(f *Frame, link uint8) uint32 {
	return uint32(f.SysID)<<16 | uint32(f.CompID)<<8 | uint32(link)
}

// signingNow is a receive time (Unix ns) as a signing timestamp.
func signingNow(unixNs int64) uint64 {
	if unixNs <= signingEpoch {
		return 0
	}
	return uint64(unixNs-signingEpoch) / 10_000
}

// fresh applies the rules to a signed frame whose signature is right,
// received at recv (a tlog stream's frame: recorded at tlogUs, its
// receive time then), and takes its timestamp when it passes.
func (g *replayGuard) fresh(f *Frame, recv, tlogUs int64) bool {
	_, link, ts, _ := f.signatureParts()
	k := signingStream(f, link)
	st := g.last[k]
	if st != nil {
		if ts <= st.ts {
			return false
		}
	} else {
		now := recv
		if tlogUs != 0 {
			now = tlogUs * 1000
		}
		if ts+newStreamLag < signingNow(now) || len(g.last) >= maxSignatureStreams {
			return false
		}
		if g.last == nil {
			g.last = map[uint32]*signingState{}
		}
		st = &signingState{}
		g.last[k] = st
	}
	st.ts = ts
	g.changed(k, st)
	return true
}

// changed lists stream k, whose state is st, to be written.
func (g *replayGuard) changed(k uint32, st *signingState) {
	if !st.dirty {
		st.dirty = true
		g.dirty = append(g.dirty, k)
	}
}

// metas are the changed timestamps as metadata writes for the next
// group, and their streams (unwritten puts them back if the group is
// refused).
func (g *replayGuard) metas() ([]localstream.AppendOption, []uint32) {
	if len(g.dirty) == 0 {
		return nil, nil
	}
	streams := g.dirty
	g.dirty = make([]uint32, 0, len(streams))
	opts := make([]localstream.AppendOption, 0, len(streams))
	for _, k := range streams {
		st := g.last[k]
		st.dirty = false
		opts = append(opts, localstream.WithMeta(signingMetaKey(k), binary.BigEndian.AppendUint64(nil, st.ts)))
	}
	return opts, streams
}

// unwritten marks streams changed again: their group was not appended.
func (g *replayGuard) unwritten(streams []uint32) {
	for _, k := range streams {
		if st := g.last[k]; st != nil {
			g.changed(k, st)
		}
	}
}

func signingMetaKey(k uint32) string {
	return fmt.Sprintf("%s%06x", signingMetaPrefix, k)
}

// restore reads the last timestamps a previous run kept.
func (g *replayGuard) restore(m MetaReader) error {
	kv, err := m.ScanMeta(signingMetaPrefix)
	if err != nil {
		return err
	}
	g.last, g.dirty = map[uint32]*signingState{}, nil
	for key, v := range kv {
		k, ts, err := parseSigningMeta(key, v)
		if err != nil {
			return err
		}
		if len(g.last) < maxSignatureStreams {
			g.last[k] = &signingState{ts: ts}
		}
	}
	return nil
}

// parseSigningMeta reads one kept timestamp (the format above).
func parseSigningMeta(key string, v []byte) (uint32, uint64, error) {
	hexPart, ok := strings.CutPrefix(key, signingMetaPrefix)
	k, err := strconv.ParseUint(hexPart, 16, 32)
	if !ok || err != nil || signingMetaKey(uint32(k)) != key || len(v) != 8 {
		return 0, 0, fmt.Errorf("mavlink: signing timestamp %q (%d bytes) is not a stream's", key, len(v))
	}
	return uint32(k), binary.BigEndian.Uint64(v), nil
}
