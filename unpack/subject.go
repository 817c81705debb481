package unpack

import (
	"strings"
)

// DerivedStreamName is the derived stream of a local stream:
// EDGEEV_<STREAM> (with one partition; see Partition.StreamName). No
// source stream has that name (they are EDGE_...).
func DerivedStreamName(stream string) string { return "EDGEEV_" + strings.ToUpper(stream) }

// DerivedSubjects is the derived stream's subject filter (with one
// partition; see Partition.Subjects).
func DerivedSubjects(stream string) string { return Partition{Stream: stream}.Subjects() }

// EventSubject is the subject of one event of agent and drone (routing
// key) in the derived stream: edgeev.<stream>.<agent>.<key>, the tokens
// escaped as in the source stream; the agent's own events (routing key =
// agent id, as in the health stream) have the key token OwnKeyToken
// instead of the agent's token a second time. It is also the subject
// filter of that drone for a consumer. With more than one partition, see
// Partition.EventSubject.
func EventSubject(stream, agent, routingKey string) string {
	return Partition{Stream: stream}.EventSubject(agent, routingKey)
}

// OwnKeyToken is the key token of an agent's own events: "@", which no
// routing key has as its token (wire.KeyToken escapes '@' as %40).
const OwnKeyToken = "@"

// sourceFilters are the source subjects that hold packs.
func sourceFilters(stream string) []string {
	return []string{"edge." + stream + ".*.cut", "edge." + stream + ".*.part"}
}
