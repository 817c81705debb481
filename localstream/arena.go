package localstream

// readArena is what a Reader decodes its records into, so that reading
// an event allocates nothing of its own in the common case: the routing
// keys, writers, content types and header strings of a stream repeat
// (one set per drone), so each is allocated once and shared; header
// slices and small payloads are carved from chunks shared by the records
// of a few fills. Everything carved is capacity-limited, so appending to
// a record's Payload or Headers copies instead of overwriting a
// neighbour's, and a chunk is never written again once carved.
//
// Memory: the string table holds at most arenaMaxStrings strings of at
// most arenaMaxString bytes (then it starts over); a chunk stays alive
// while a record carved from it does, at most arenaChunk bytes beside
// the record's own. A nil *readArena allocates as before.
type readArena struct {
	strs    map[string]string
	hdrs    []Header // free part of the current header chunk
	payload []byte   // free part of the current payload chunk
}

const (
	arenaMaxStrings = 4096
	arenaMaxString  = 256
	arenaChunk      = 32 << 10 // bytes of a payload chunk
	arenaMaxPayload = 2 << 10  // larger payloads get their own allocation
	arenaHeaders    = 512      // headers of a header chunk
)

// str returns b as a string, the same string for the same bytes.
func (a *readArena) str(b []byte) string {
	if a == nil || len(b) > arenaMaxString {
		return string(b)
	}
	if s, ok := a.strs[string(b)]; ok { // no allocation for the lookup
		return s
	}
	if a.strs == nil || len(a.strs) >= arenaMaxStrings {
		a.strs = make(map[string]string, 64)
	}
	s := string(b)
	a.strs[s] = s
	return s
}

// headers returns an empty header slice with room for n.
func (a *readArena) headers(n int) []Header {
	if a == nil || n > arenaHeaders/8 {
		return make([]Header, 0, n)
	}
	if len(a.hdrs) < n {
		a.hdrs = make([]Header, arenaHeaders)
	}
	h := a.hdrs[:0:n]
	a.hdrs = a.hdrs[n:]
	return h
}

// copy returns a copy of b (nil when b is empty).
func (a *readArena) copy(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	if a == nil || len(b) > arenaMaxPayload {
		return append([]byte(nil), b...)
	}
	if len(a.payload) < len(b) {
		a.payload = make([]byte, arenaChunk)
	}
	p := a.payload[:len(b):len(b)]
	copy(p, b)
	a.payload = a.payload[len(b):]
	return p
}
