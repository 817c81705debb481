package devices

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/edge-agent/edge-agent/localstream"
)

// Carried gap markers. A shed range can hold gap markers of earlier sheds
// that no sink has committed yet; deleting them would lose the report of a
// loss, so they are appended again. Each is recorded in the store's
// metadata before the shed, and cleared in the same transaction as its
// new append (WithMeta, empty value):
//
//	x | "devices/gap/" <stream> "/" <unix ns, 20 digits> "-" <seq, 8 digits>  →  storedMarker (JSON)
//
// Carried markers are admitted below the store's free-space floor, like
// the shed's own markers. A marker the store refuses all the same (closed,
// failed) stays pending, in memory and on disk, and is retried at every
// check. A marker whose shed was refused before the head moved (a full
// disk) awaits its shed: localstream may have recorded the shed, and then
// finishes it (FinishSheds, or the next Open) and deletes the original
// later. At every check, once FinishSheds leaves no shed to finish, it is
// appended if its original is gone and dropped if it is retained (the
// shed was not recorded); a new shed meanwhile does not carry its
// original again. At start (Open has finished every recorded shed), a
// recorded marker whose original is still retained (a crash before the
// shed) is dropped; the others are pending. So a carried marker is
// appended once.
const markerPrefix = "devices/gap/"

// storedMarker is a carried gap marker in the store's metadata.
type storedMarker struct {
	Origin      localstream.Position `json:"origin"`
	RoutingKey  string               `json:"routing_key"`
	Writer      string               `json:"writer"`
	Flags       localstream.Flags    `json:"flags"`
	ContentType string               `json:"content_type"`
	Payload     []byte               `json:"payload"`
}

// decodeStoredMarker decodes and checks a recorded carried marker.
func decodeStoredMarker(b []byte) (storedMarker, error) {
	var sm storedMarker
	if err := json.Unmarshal(b, &sm); err != nil {
		return sm, fmt.Errorf("%w: %w", ErrCorruptMarker, err)
	}
	if sm.RoutingKey == "" || sm.Writer == "" || !sm.Flags.Has(localstream.FlagGap) {
		return sm, fmt.Errorf("%w: routing key %q, writer %q, flags %#x", ErrCorruptMarker, sm.RoutingKey, sm.Writer, sm.Flags)
	}
	return sm, nil
}

// pendingMarker is a carried gap marker not yet appended again.
type pendingMarker struct {
	stream *localstream.Stream
	ev     localstream.Event
	key    string // metadata key; "" if it could not be recorded
	origin localstream.Position
	// await: its shed was refused before the head moved; appended once
	// the original is gone, dropped if no shed is left to delete it.
	await bool
}

// recordMarker records a gap marker about to be carried.
func (p *Pressure) recordMarker(st *localstream.Stream, rec localstream.Record) pendingMarker {
	p.mu.Lock()
	p.seq++
	key := fmt.Sprintf("%s%s/%020d-%08d", markerPrefix, st.Name(), p.cfg.Now().UnixNano(), p.seq)
	p.mu.Unlock()
	b, _ := json.Marshal(storedMarker{Origin: rec.Position, RoutingKey: rec.RoutingKey, Writer: rec.Writer,
		Flags: rec.Flags, ContentType: rec.ContentType, Payload: rec.Payload})
	if err := p.store.PutMeta(key, b); err != nil {
		p.fail(fmt.Errorf("devices: record carried gap marker: %w", err))
		key = ""
	}
	return pendingMarker{stream: st, ev: rec.Event, key: key, origin: rec.Position}
}

// await queues the carried markers of a shed refused before the head
// moved (see retryMarkers).
func (p *Pressure) await(ms []pendingMarker) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range ms {
		if len(p.pending) >= p.cfg.MaxPendingMarkers {
			p.stats.MarkersLost++ // (still recorded: a restart resolves it)
			p.cfg.Logger.Error("devices: carried gap marker lost: too many pending", "stream", m.stream.Name())
			continue
		}
		m.await = true
		p.pending = append(p.pending, m)
	}
}

// awaited returns the originals of st's markers awaiting their shed.
func (p *Pressure) awaited(st *localstream.Stream) map[localstream.Position]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[localstream.Position]bool{}
	for _, m := range p.pending {
		if m.await && m.stream == st {
			out[m.origin] = true
		}
	}
	return out
}

// appendMarker appends a carried marker again. If the store refuses, the
// marker is kept pending (queue: when fresh) and false returned. ctx
// bounds the queueing only: once queued, the append's outcome is the
// store's (as for localstream's own markers), since a marker whose
// append lands after ctx ended is appended, and kept pending it would be
// appended twice.
func (p *Pressure) appendMarker(ctx context.Context, m pendingMarker, fresh bool) bool {
	m.ev.IngestTime = p.cfg.Now().UnixNano()
	opts := []localstream.AppendOption{localstream.BelowFloor()}
	if m.key != "" {
		opts = append(opts, localstream.WithMeta(m.key, nil))
	}
	done := make(chan error, 1)
	err := m.stream.AppendAsync(ctx, m.ev, func(_ localstream.Position, err error) { done <- err }, opts...)
	if err == nil {
		err = <-done
	}
	if err != nil {
		if fresh {
			p.mu.Lock()
			if len(p.pending) < p.cfg.MaxPendingMarkers {
				p.pending = append(p.pending, m)
			} else {
				p.stats.MarkersLost++
				p.cfg.Logger.Error("devices: carried gap marker lost: too many pending", "stream", m.stream.Name())
			}
			p.mu.Unlock()
		}
		return false
	}
	p.count(m.stream.Name(), func(s *StreamPressureStats) { s.MarkersCarried++ })
	return true
}

// retryMarkers finishes the sheds that the store refused (localstream's
// FinishSheds: a full disk has no room for their tombstones or for the
// memtable's table until space is reclaimed), appending their gap
// markers, then appends the pending carried markers, in order, until the
// store refuses one or one still awaits its shed. A marker awaiting its
// shed is appended once its original is gone; with no shed left to
// finish and its original retained, its shed was never recorded: it is
// dropped.
func (p *Pressure) retryMarkers(ctx context.Context) {
	n, err := p.store.FinishSheds(ctx)
	for name, k := range n {
		p.count(name, func(s *StreamPressureStats) { s.GapMarkers += uint64(k) })
	}
	if err != nil && !errors.Is(err, localstream.ErrDiskFull) {
		p.fail(fmt.Errorf("devices: finish sheds: %w", err))
	}
	finished := err == nil
	for {
		p.mu.Lock()
		if len(p.pending) == 0 {
			p.mu.Unlock()
			return
		}
		m := p.pending[0]
		p.mu.Unlock()
		if m.await {
			gone, cerr := m.stream.Topology().Contains(m.stream.HeadCut(), m.origin)
			switch {
			case cerr != nil || gone: // deleted: the copy goes in
			case finished: // retained, and no shed left to delete it
				if m.key != "" {
					p.store.DeleteMeta(m.key)
				}
				p.mu.Lock()
				p.pending = p.pending[1:]
				p.mu.Unlock()
				continue
			default:
				return // its shed is still to be finished
			}
		}
		if !p.appendMarker(ctx, m, false) {
			return
		}
		p.mu.Lock()
		p.pending = p.pending[1:]
		p.mu.Unlock()
	}
}

// loadMarkers reads back the carried markers recorded before the last stop.
func (p *Pressure) loadMarkers() error {
	stored, err := p.store.ScanMeta(markerPrefix)
	if err != nil {
		return fmt.Errorf("devices: read carried gap markers: %w", err)
	}
	for _, key := range slices.Sorted(maps.Keys(stored)) {
		v := stored[key]
		name, _, _ := strings.Cut(key[len(markerPrefix):], "/")
		st, err := p.store.Stream(name)
		if len(v) == 0 { // appended: only the tidy-up was missed
			p.store.DeleteMeta(key)
			continue
		}
		sm, derr := decodeStoredMarker(v)
		if err != nil || derr != nil {
			p.stats.MarkersLost++
			p.cfg.Logger.Error("devices: unreadable carried gap marker dropped", "key", key)
			p.store.DeleteMeta(key)
			continue
		}
		if gone, err := st.Topology().Contains(st.HeadCut(), sm.Origin); err == nil && !gone {
			p.store.DeleteMeta(key) // crashed before the shed: the original is still there
			continue
		}
		p.pending = append(p.pending, pendingMarker{stream: st, key: key, origin: sm.Origin, ev: localstream.Event{
			RoutingKey: sm.RoutingKey, Writer: sm.Writer, Flags: sm.Flags, ContentType: sm.ContentType, Payload: sm.Payload}})
	}
	return nil
}
