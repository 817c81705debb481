package unpack

import (
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/edge-agent/edge-agent/wire"
)

// Partition is one derived stream of a local stream. With one partition
// (Count 0 or 1, the default) that is EDGEEV_<STREAM> on
// edgeev.<stream>.<agent>.<key>, as before partitions existed. With
// Count N > 1 the events are spread over N streams by agent:
//
//	stream     EDGEEV_<STREAM>_P<i>                 i = 0 … N-1
//	subjects   edgeev.<stream>.p<i>.<agent>.<key>   i = PartitionOf(agent, N)
//
// Each partition is a derived stream of its own, with its own cursor,
// fence and active/standby pair; within a partition, each drone's events
// are in source order as in an unpartitioned stream. A consumer of every
// partition reads the N streams (or subscribes to edgeev.<stream>.>); one
// drone's subject filter is edgeev.<stream>.p<i>.<agent>.<key> with i
// computed, or edgeev.<stream>.*.<agent>.<key> across partitions.
type Partition struct {
	// Stream is the local stream name.
	Stream string
	// Index is the partition, 0 … Count-1.
	Index int
	// Count is the number of partitions of the stream; 0 and 1 both mean
	// one derived stream, EDGEEV_<STREAM>.
	Count int
}

// Partitions returns the n partitions of stream (one, the whole stream,
// when n ≤ 1).
func Partitions(stream string, n int) []Partition {
	n = max(n, 1)
	out := make([]Partition, n)
	for i := range out {
		out[i] = Partition{Stream: stream, Index: i, Count: n}
	}
	return out
}

// PartitionOf is the partition, of n, that holds agent's events:
// FNV-1a 32-bit of the agent's subject token (wire.EscapeToken(agent),
// the <agent> token of the source and derived subjects; the agent id
// itself unless it has bytes outside [A-Za-z0-9_-]) modulo n. It is the
// hash of nats-server's subject mapping function partition(n, k) over
// that token, so a NATS subject mapping of edge.<stream>.*.> computes the
// same partition. 0 when n ≤ 1.
func PartitionOf(agent string, n int) int { return tokenPartition(wire.EscapeToken(agent), n) }

// tokenPartition is PartitionOf from the agent's subject token.
func tokenPartition(token string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(token))
	return int(h.Sum32() % uint32(n))
}

// partitioned reports whether the stream has more than one partition.
func (p Partition) partitioned() bool { return p.Count > 1 }

// StreamName is the partition's derived stream: EDGEEV_<STREAM>, or
// EDGEEV_<STREAM>_P<i> with more than one partition.
func (p Partition) StreamName() string {
	if !p.partitioned() {
		return DerivedStreamName(p.Stream)
	}
	return DerivedStreamName(p.Stream) + "_P" + strconv.Itoa(p.Index)
}

// root is the subject prefix of the partition's messages.
func (p Partition) root() string {
	if !p.partitioned() {
		return "edgeev." + p.Stream
	}
	return "edgeev." + p.Stream + ".p" + strconv.Itoa(p.Index)
}

// Subjects is the partition's stream subject filter: edgeev.<stream>.>
// or edgeev.<stream>.p<i>.>.
func (p Partition) Subjects() string { return p.root() + ".>" }

// EventSubject is the subject, in this partition, of one event of agent
// and drone (routing key): edgeev.<stream>[.p<i>].<agent>.<key>, tokens
// as EventSubject. The agent must be one of the partition's
// (PartitionOf); a consumer's filter for that drone.
func (p Partition) EventSubject(agent, routingKey string) string {
	a, k := wire.EscapeToken(agent), wire.KeyToken(routingKey)
	if k == a {
		k = OwnKeyToken
	}
	return p.root() + "." + a + "." + k
}

// holds reports whether the source message on subject (edge.<stream>.
// <agent>.cut or .part) is of one of the partition's agents. A subject
// without an agent token belongs to partition 0.
func (p Partition) holds(subject string) bool {
	if !p.partitioned() {
		return true
	}
	return tokenPartition(sourceAgentToken(subject), p.Count) == p.Index
}

// sourceAgentToken is the <agent> token of a source subject
// edge.<stream>.<agent>.<kind> ("" when it has another form).
func sourceAgentToken(subject string) string {
	parts := strings.Split(subject, ".")
	if len(parts) != 4 {
		return ""
	}
	return parts[2]
}

func (p Partition) String() string { return p.StreamName() }

// Stream metadata keys a derived stream carries, so that an unpacker
// started with another partition count refuses it instead of mixing two
// hashes in one stream.
const (
	metaPartitions = "edge-agent.partitions"
	metaPartition  = "edge-agent.partition"
)

// metadata is the partition's stream metadata.
func (p Partition) metadata() map[string]string {
	return map[string]string{metaPartitions: strconv.Itoa(max(p.Count, 1)), metaPartition: strconv.Itoa(p.Index)}
}
