package video

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"
)

// maxCandidates bounds the SSRCs on probation.
const maxCandidates = 256

// probationPackets is how many packets in sequence a new SSRC must send
// before it becomes a drone (RFC 3550 A.1 MIN_SEQUENTIAL).
const probationPackets = 2

// item is one datagram queued for a drone.
type item struct {
	b       []byte
	arrival time.Time
	rtcp    bool
	// owned: b is the item's own copy (the readers' buffers are reused).
	owned bool
}

// own copies the datagram out of the reader's buffer, once.
func (it *item) own() {
	if !it.owned {
		it.b, it.owned = append([]byte(nil), it.b...), true
	}
}

// droneRun is a running drone: its state machine and its queue.
type droneRun struct {
	d     *drone
	ch    chan item
	ssrcs []uint32 // bound SSRCs (router lock)
	gone  bool     // removed from the router (router lock)
	// configured: the drone is in Config.Drones and is never evicted.
	configured bool
	// lastSeen is the arrival of the last datagram routed to it (router lock).
	lastSeen time.Time
	// evict is closed when the router gave the drone's slot to another.
	evict chan struct{}
}

// candidate is an SSRC on probation.
type candidate struct {
	src     netip.AddrPort
	lastSeq uint16
	hits    int
	held    []item
	since   time.Time
}

// router maps datagrams to drones: by SSRC once known, else by probation
// and configuration. All methods are called with mu held by the Ingest.
type router struct {
	cfg       *Config
	allow     []netip.Prefix
	cfgBySSRC map[uint32]*DroneConfig
	bySSRC    map[uint32]*droneRun
	byID      map[string]*droneRun
	cands     map[uint32]*candidate
	rc        *receiveCounters
	// queued counts the bytes of datagrams queued for all drones (the
	// drones subtract what they take); at most cfg.QueueBytes.
	queued *atomic.Int64
	// start launches a drone (the Ingest's goroutine).
	start func(id string, dc *DroneConfig) *droneRun
}

func newRouter(cfg *Config, rc *receiveCounters, start func(string, *DroneConfig) *droneRun) *router {
	r := &router{
		cfg: cfg, rc: rc, start: start, queued: new(atomic.Int64),
		cfgBySSRC: map[uint32]*DroneConfig{},
		bySSRC:    map[uint32]*droneRun{},
		byID:      map[string]*droneRun{},
		cands:     map[uint32]*candidate{},
	}
	for _, a := range cfg.Allow {
		p, _ := parsePrefix(a) // checked by Validate
		r.allow = append(r.allow, p)
	}
	for i := range cfg.Drones {
		if dc := &cfg.Drones[i]; dc.SSRC != 0 {
			r.cfgBySSRC[dc.SSRC] = dc
		}
	}
	return r
}

func (r *router) allowed(a netip.Addr) bool {
	if len(r.allow) == 0 {
		return true
	}
	for _, p := range r.allow {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// screen reports whether a datagram may be RTP/RTCP from an allowed
// source, counting it when not. The readers screen before they copy, so
// that garbage never takes (or pins) memory. Safe without the router lock.
func (r *router) screen(b []byte, src netip.AddrPort) bool {
	if len(b) < 8 || b[0]>>6 != 2 {
		r.rc.notRTP.Add(1)
		return false
	}
	if !r.allowed(src.Addr().Unmap()) {
		r.rc.rejected.Add(1)
		return false
	}
	return true
}

// dispatch routes one screened datagram; rtcpPort is true for the RTCP socket.
func (r *router) dispatch(b []byte, src netip.AddrPort, arrival time.Time, rtcpPort bool) {
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	it := item{b: b, arrival: arrival}
	// RFC 5761 §4: RTCP packet types 192-223 occupy the second byte.
	if rtcpPort || (b[1] >= 192 && b[1] <= 223) {
		it.rtcp = true
		r.routeRTCP(binary.BigEndian.Uint32(b[4:8]), it)
		return
	}
	if len(b) < 12 {
		r.rc.notRTP.Add(1)
		return
	}
	r.routeRTP(binary.BigEndian.Uint32(b[8:12]), binary.BigEndian.Uint16(b[2:4]), src, it)
}

func (r *router) routeRTCP(ssrc uint32, it item) {
	if dr := r.bySSRC[ssrc]; dr != nil {
		r.enqueue(dr, it)
		return
	}
	if dc := r.cfgBySSRC[ssrc]; dc != nil {
		if dr := r.bind(ssrc, dc.ID, dc, it.arrival); dr != nil {
			r.enqueue(dr, it)
		}
		return
	}
	// A report may come before the first RTP packet: hold it with the
	// SSRC's candidate (creating one) so the first frames get its time.
	c := r.cands[ssrc]
	if c == nil {
		r.evictCandidate()
		c = &candidate{since: it.arrival}
		r.cands[ssrc] = c
	}
	if len(c.held) >= 2*probationPackets {
		r.rc.unknownRTCP.Add(1)
		return
	}
	it.own()
	c.held = append(c.held, it)
}

func (r *router) routeRTP(ssrc uint32, seq uint16, src netip.AddrPort, it item) {
	if dr := r.bySSRC[ssrc]; dr != nil {
		r.enqueue(dr, it)
		return
	}
	if dc := r.cfgBySSRC[ssrc]; dc != nil {
		if dr := r.bind(ssrc, dc.ID, dc, it.arrival); dr != nil {
			r.enqueue(dr, it)
		}
		return
	}
	c := r.cands[ssrc]
	switch {
	case c == nil:
		r.evictCandidate()
		c = &candidate{src: src, since: it.arrival}
		r.cands[ssrc] = c
	case c.hits == 0: // created by an RTCP report
		c.src = src
	case c.src != src || seq != c.lastSeq+1:
		r.rc.unverified.Add(uint64(len(c.held)))
		*c = candidate{src: src, since: it.arrival, held: c.held[:0]}
	}
	c.lastSeq, c.hits = seq, c.hits+1
	it.own()
	c.held = append(c.held, it)
	if c.hits < probationPackets {
		return
	}
	delete(r.cands, ssrc)
	id, dc := r.identify(ssrc, src)
	if id == "" {
		r.rc.unverified.Add(uint64(len(c.held)))
		return
	}
	dr := r.bind(ssrc, id, dc, it.arrival)
	if dr == nil {
		return
	}
	for _, h := range c.held {
		r.enqueue(dr, h)
	}
}

// identify names the drone of a verified SSRC: configured by source
// address (ip:port, then ip), else discovered, else "" (refused).
func (r *router) identify(ssrc uint32, src netip.AddrPort) (string, *DroneConfig) {
	for pass := 0; pass < 2; pass++ {
		for i := range r.cfg.Drones {
			dc := &r.cfg.Drones[i]
			if !dc.src.IsValid() || dc.src.Addr() != src.Addr() {
				continue
			}
			if (pass == 0 && dc.src.Port() == src.Port()) || (pass == 1 && dc.src.Port() == 0) {
				return dc.ID, dc
			}
		}
	}
	if r.cfg.Discover != nil && *r.cfg.Discover {
		return fmt.Sprintf("ssrc-%08x", ssrc), nil
	}
	return "", nil
}

// bind maps ssrc to drone id, starting the drone if needed. When
// max_drones are running, a newcomer takes the slot of the discovered drone
// silent the longest, if it has been silent for evict_idle (a configured
// newcomer takes it however recent); else it is refused.
func (r *router) bind(ssrc uint32, id string, dc *DroneConfig, now time.Time) *droneRun {
	dr := r.byID[id]
	if dr == nil {
		if len(r.byID) >= r.cfg.MaxDrones && !r.evictIdlest(now, dc != nil) {
			r.rc.tooManyDrones.Add(1)
			return nil
		}
		dr = r.start(id, dc)
		dr.configured, dr.lastSeen = dc != nil, now
		r.byID[id] = dr
	}
	r.bySSRC[ssrc] = dr
	dr.ssrcs = append(dr.ssrcs, ssrc)
	if len(dr.ssrcs) > 4 { // an old SSRC of this drone stops mapping to it
		delete(r.bySSRC, dr.ssrcs[0])
		dr.ssrcs = dr.ssrcs[1:]
	}
	return dr
}

// evictIdlest removes the discovered drone silent the longest if it has
// been silent for evict_idle (any, when force) and tells its goroutine to
// close it. It reports whether a slot was freed. O(max_drones), only when
// the drones are all taken.
func (r *router) evictIdlest(now time.Time, force bool) bool {
	var victim *droneRun
	for _, dr := range r.byID {
		if !dr.configured && (victim == nil || dr.lastSeen.Before(victim.lastSeen)) {
			victim = dr
		}
	}
	if victim == nil || (!force && now.Sub(victim.lastSeen) < r.cfg.EvictIdle) {
		return false
	}
	r.remove(victim)
	close(victim.evict)
	r.rc.evicted.Add(1)
	return true
}

// evictCandidate makes room for a new candidate by dropping one at random
// (map order): O(1) under a flood of random SSRCs, and a real sender that
// loses its place simply tries again with its next two packets.
func (r *router) evictCandidate() {
	if len(r.cands) < maxCandidates {
		return
	}
	for s, c := range r.cands {
		r.rc.unverified.Add(uint64(len(c.held)))
		delete(r.cands, s)
		return
	}
}

func (r *router) enqueue(dr *droneRun, it item) {
	if it.arrival.After(dr.lastSeen) {
		dr.lastSeen = it.arrival
	}
	n := int64(len(it.b))
	if r.queued.Add(n) > int64(r.cfg.QueueBytes) {
		r.queued.Add(-n)
		dr.d.c.queueDrops.Add(1)
		return
	}
	it.own()
	select {
	case dr.ch <- it:
	default:
		r.queued.Add(-n)
		dr.d.c.queueDrops.Add(1)
	}
}

// remove unbinds a drone that is closing.
func (r *router) remove(dr *droneRun) {
	dr.gone = true
	for _, s := range dr.ssrcs {
		if r.bySSRC[s] == dr {
			delete(r.bySSRC, s)
		}
	}
	if r.byID[dr.d.id] == dr {
		delete(r.byID, dr.d.id)
	}
}
