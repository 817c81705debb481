package video

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/edge-agent/edge-agent/ingest/guard"
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
	// src is the datagram's source (checked when a held report is released).
	src netip.AddrPort
	// conn is the RTSP connection a pulled packet came in on (nil for
	// pushed RTP): a drone that sees a new one starts a new session.
	conn *sourceConn
	// dropped is how many RTP packets of the drone its full queue dropped
	// right before this one (its sequence numbers are lost).
	dropped int
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
	// dc is the drone's configuration; nil for a discovered drone, which
	// may be evicted.
	dc *DroneConfig
	// lastSeen is the arrival (Unix ns) of the last datagram routed to
	// it (router lock): its activity for the drones' table.
	lastSeen int64
	// evict is closed when the router gave the drone's slot to another.
	evict chan struct{}
	// drops are the RTP packets dropped since the last one queued
	// (router lock): the next one carries them (item.dropped).
	drops int
}

// binding is an SSRC bound to the source that started it (RFC 3550 §8.2:
// the same SSRC from another transport address is a collision or a
// loop — or, on a shared network, anyone speaking for the drone): a
// guard.Binding of the RTP source. After rebind_after of silence
// another source may take the SSRC over.
type binding struct {
	dr *droneRun
	b  guard.Binding[netip.AddrPort]
}

// reportFrom reports whether an RTCP datagram from src may speak for b:
// from the RTP source or the next port (RFC 3550 §11's pair), on the
// same address.
func (b *binding) reportFrom(src netip.AddrPort) bool {
	rtp, _ := b.b.Source()
	return src.Addr() == rtp.Addr() && (src.Port() == rtp.Port() || src.Port() == rtp.Port()+1)
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
	bySSRC    map[uint32]*binding
	// byID are the running drones (guard.Table): configured ones and
	// sources pinned, at most max_drones discovered ones.
	byID  *guard.Table[string, *droneRun]
	cands map[uint32]*candidate
	rc    *receiveCounters
	// queued counts the bytes of datagrams queued for all drones (the
	// drones subtract what they take); at most cfg.QueueBytes.
	queued *atomic.Int64
	// start launches dr, held in byID, as drone id: it sets dr's drone,
	// queue and evict channel and starts its goroutine (the Ingest's).
	start func(id string, dr *droneRun)
}

func newRouter(cfg *Config, rc *receiveCounters, start func(string, *droneRun)) *router {
	r := &router{
		cfg: cfg, rc: rc, start: start, queued: new(atomic.Int64),
		cfgBySSRC: map[uint32]*DroneConfig{},
		bySSRC:    map[uint32]*binding{},
		cands:     map[uint32]*candidate{},
	}
	r.byID = r.newDrones()
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
	it := item{b: b, arrival: arrival, src: src}
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

// routeRTCP routes a report by its sender SSRC: to the SSRC's drone when
// it comes from the SSRC's source (else it is spoofed), or held with the
// SSRC's candidate until its first RTP packets bind it.
func (r *router) routeRTCP(ssrc uint32, it item) {
	if b := r.bySSRC[ssrc]; b != nil {
		if !b.reportFrom(it.src) {
			b.dr.d.c.spoofed.Add(1)
			return
		}
		r.enqueue(b.dr, it)
		return
	}
	// A report may come before the first RTP packet (also of a configured
	// SSRC): hold it with the SSRC's candidate (creating one) so the first
	// frames get its time once the RTP source is known.
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
	if b := r.bySSRC[ssrc]; b != nil {
		if r.fromBound(b, src, it.arrival) {
			r.enqueue(b.dr, it)
		}
		return
	}
	if dc := r.cfgBySSRC[ssrc]; dc != nil {
		if dr := r.bind(ssrc, dc.ID, dc, src, it.arrival); dr != nil {
			r.release(ssrc, dr)
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
	id, dc := r.identify(ssrc, src)
	if id == "" {
		delete(r.cands, ssrc)
		r.rc.unverified.Add(uint64(len(c.held)))
		return
	}
	if dr := r.bind(ssrc, id, dc, src, it.arrival); dr != nil {
		r.release(ssrc, dr)
		return
	}
	delete(r.cands, ssrc)
}

// fromBound reports whether an RTP packet from src may speak for the
// bound SSRC b: it comes from b's source, or that source has been silent
// for rebind_after and src may belong to the drone (a configured
// address must match), in which case src takes the SSRC over. Others are
// counted spoofed.
func (r *router) fromBound(b *binding, src netip.AddrPort, now time.Time) bool {
	may := b.dr.dc == nil || addrMatches(b.dr.dc.src, src)
	switch b.b.Admit(src, now.UnixNano(), r.cfg.RebindAfter, may) {
	case guard.Spoofed:
		b.dr.d.c.spoofed.Add(1)
		return false
	case guard.Rebound:
		b.dr.d.c.rebinds.Add(1)
	}
	return true
}

// addrMatches reports whether src is the configured source want (any
// source when want is unset; any port when its port is 0).
func addrMatches(want, src netip.AddrPort) bool {
	return !want.IsValid() || (want.Addr() == src.Addr() && (want.Port() == 0 || want.Port() == src.Port()))
}

// release queues for dr what the SSRC's candidate held, in order: its
// RTP packets (all from the source that passed probation) and the
// reports from that source (others are spoofed).
func (r *router) release(ssrc uint32, dr *droneRun) {
	c := r.cands[ssrc]
	if c == nil {
		return
	}
	delete(r.cands, ssrc)
	b := r.bySSRC[ssrc]
	for _, h := range c.held {
		if h.rtcp && !b.reportFrom(h.src) {
			dr.d.c.spoofed.Add(1)
			continue
		}
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

// bind maps ssrc to drone id, bound to src, starting the drone if needed
// (droneFor). It returns nil when the drone has no slot.
func (r *router) bind(ssrc uint32, id string, dc *DroneConfig, src netip.AddrPort, now time.Time) *droneRun {
	dr := r.droneFor(id, dc, now)
	if dr == nil {
		r.rc.tooManyDrones.Add(1)
		return nil
	}
	b := &binding{dr: dr}
	b.b.Admit(src, now.UnixNano(), r.cfg.RebindAfter, true)
	r.bySSRC[ssrc] = b
	dr.ssrcs = append(dr.ssrcs, ssrc)
	if len(dr.ssrcs) > 4 { // an old SSRC of this drone stops mapping to it
		delete(r.bySSRC, dr.ssrcs[0])
		dr.ssrcs = dr.ssrcs[1:]
	}
	return dr
}

// newDrones is the drones' table by id (guard.Table): configured drones
// and RTSP sources pinned (bounded by the config), at most max_drones
// discovered ones. When they are all taken, a discovered newcomer takes
// the slot of the discovered drone silent the longest if it has been
// silent for evict_idle: that drone is unbound and told to close
// (evicted, counted).
func (r *router) newDrones() *guard.Table[string, *droneRun] {
	return guard.NewTable(guard.TableConfig[string, *droneRun]{
		Max: r.cfg.MaxDrones, Idle: r.cfg.EvictIdle,
		// The router keeps each drone's activity as it queues (enqueue):
		// the table is not written per packet.
		Active: func(_ string, dr *droneRun) int64 { return dr.lastSeen },
		Release: func(_ string, dr *droneRun) {
			r.unbind(dr)
			close(dr.evict)
			r.rc.evicted.Add(1)
		},
	})
}

// droneFor returns the running drone id, starting it when it is not
// running: pinned when configured (dc set), else in a slot of the
// table; nil when no slot is free.
func (r *router) droneFor(id string, dc *DroneConfig, now time.Time) *droneRun {
	if dr, ok := r.byID.Peek(id); ok {
		return dr
	}
	ns := now.UnixNano()
	dr := &droneRun{dc: dc, lastSeen: ns}
	if dc != nil {
		r.byID.Pin(id, dr, ns)
	} else if !r.byID.Add(id, dr, ns) {
		return nil
	}
	r.start(id, dr)
	return dr
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
	dr.lastSeen = max(dr.lastSeen, it.arrival.UnixNano())
	n := int64(len(it.b))
	if r.queued.Add(n) > int64(r.cfg.QueueBytes) {
		r.queued.Add(-n)
		r.drop(dr, it)
		return
	}
	it.own()
	if !it.rtcp {
		it.dropped, dr.drops = dr.drops, 0
	}
	select {
	case dr.ch <- it:
	default:
		r.queued.Add(-n)
		dr.drops += it.dropped
		r.drop(dr, it)
	}
}

// drop counts a datagram the drone's full queue drops; an RTP one is
// lost video, told to the drone with the next one queued. Router lock.
func (r *router) drop(dr *droneRun, it item) {
	dr.d.c.queueDrops.Add(1)
	if !it.rtcp {
		dr.drops++
	}
}

// startSource returns the running drone of an RTSP source, starting it
// when it is not running (its first packet, or after session_timeout of
// silence closed it). A source's drone is configured: never evicted, and
// not refused by max_drones (the sources are bounded by the config).
func (r *router) startSource(dc *DroneConfig, now time.Time) *droneRun {
	return r.droneFor(dc.ID, dc, now)
}

// remove unbinds a drone that is closing and gives back its place.
func (r *router) remove(dr *droneRun) {
	r.unbind(dr)
	if cur, ok := r.byID.Peek(dr.d.id); ok && cur == dr {
		r.byID.Delete(dr.d.id)
	}
}

// unbind marks dr gone and drops its SSRCs' bindings.
func (r *router) unbind(dr *droneRun) {
	dr.gone = true
	for _, s := range dr.ssrcs {
		if b := r.bySSRC[s]; b != nil && b.dr == dr {
			delete(r.bySSRC, s)
		}
	}
}
