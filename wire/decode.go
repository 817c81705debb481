package wire

import (
	"fmt"

	"github.com/nats-io/nats.go"
)

// DecodeMessage decodes one message of a central stream written in
// either layout (docs/central-format.md), for consumers that read the
// JetStream stream themselves: its events in order (layout 2: every
// event of the pack; layout 1: the one event of a data subject) and, for
// a message on a cut subject, the commit record that ends the
// transaction. The events' Seq is left 0 (the caller knows the message's
// stream sequence). An event replaced by a marker has Dropped set.
func DecodeMessage(subj string, h nats.Header, data []byte) ([]CentralEvent, *CommitRecord, error) {
	p, err := parseSubject(subj)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case p.kind == subjectData:
		ev, err := DecodeEvent(subj, h, data)
		if err != nil {
			return nil, nil, err
		}
		return []CentralEvent{ev}, nil, nil
	case p.kind == subjectCut && !isPack(data):
		rec, err := DecodeCommitRecord(data)
		if err != nil {
			return nil, nil, err
		}
		return nil, &rec, nil
	}
	pk, err := decodePack(p.stream, data)
	if err != nil {
		return nil, nil, err
	}
	if (pk.commit != nil) != (p.kind == subjectCut) {
		return nil, nil, fmt.Errorf("%w: commit record on a part subject, or none on the cut subject", ErrCorruptRecord)
	}
	evs := make([]CentralEvent, len(pk.events))
	for i, rec := range pk.events {
		rec, dropped := packEvent(rec)
		evs[i] = CentralEvent{Stream: p.stream, Agent: p.agent, Txn: pk.txn, Record: rec, Dropped: dropped}
	}
	var commit *CommitRecord
	if pk.commit != nil {
		c := pk.commit.Record(p.agent, p.stream)
		commit = &c
	}
	return evs, commit, nil
}
