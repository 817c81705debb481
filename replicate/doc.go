// Package replicate replicates local streams to the central store (NATS
// JetStream) exactly once, resumable from committed stream cuts: the
// replicator of one stream and its resume decisions (chain, resume), the
// JetStream sink of both central layouts with its fencing and limits, the
// connection and its link, the uplink's byte budget shared by all streams
// of an agent, and the station identity. What it writes is the format of
// package wire; it never reads through package centralread.
//
// # Publishing
//
// Layout 2 (the default): a transaction is one plain JetStream publish of
// its pack on the cut subject, so the server's limits on atomic batches
// in flight (50 per stream, 1,000 per server by default) and its 10 s
// batch timeout do not apply; the number of agents per stream is bound by
// the stream leader's message rate (docs/sync.md, sizing). The rare split
// transaction (one event too large to share a message with the commit
// record) is a two-message atomic batch whose first message is acked, so
// that the server's refusal is read and retried after a jittered backoff.
// Layout 1: a transaction is one atomic batch (ADR-50, via orbit.go
// jetstreamext) of its data messages and the commit record, within the
// centre's limits (Limits: the max payload from the server's INFO, the
// batch limits configured and lowered by the server's rejections).
//
// # Exactly once
//
// The resume point is the last commit record on the agent's cut subject,
// read through the stream leader ($JS.API.STREAM.MSG.GET, never a direct
// get). The next transaction holds the local events after that cut and
// expects that record's sequence, so the commit records form one chain: a
// retried, duplicated or late batch fails the expectation and leaves
// nothing (atomic), and a commit whose ack was lost is found at the resume,
// not resent. Dedup windows play no part.
//
// Commits are pipelined: the next transaction's events are read (and, in
// layout 1, sent) while the previous commit awaits its ack, and its commit
// (which must expect the previous record's sequence) goes out only after
// that ack; when a commit fails, the transaction behind it is abandoned.
//
// One chain per store identity at a time (resume.go): the decision after
// every central read is Decide, a deterministic function of the local
// store's state and the chain's last record; never of how long the last
// writer was silent. A record of another station's store, or of a copy
// of this store elsewhere, means another station uses this agent id: the
// stream stops with ErrTwin, naming both identities, until an operator
// takes over; another store committing while this one runs means this
// one was taken over (ErrFenced). A store that lost data, was restored
// from a backup, or takes over its station's replaced disk continues
// under a new epoch base and reports the loss in the next commit record.
// Such a rebase first reads back the identities of the agent's last
// committed events at the centre (ReadTail), so that an intake's marked
// redelivery of an event the lost state had already sent is not sent
// again (repeats.go, RepeatFunc).
package replicate
