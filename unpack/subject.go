package unpack

import (
	"strings"

	"github.com/edge-agent/edge-agent/wire"
)

// DerivedStreamName is the derived stream of a local stream:
// EDGEEV_<STREAM>. No source stream has that name (they are EDGE_...).
func DerivedStreamName(stream string) string { return "EDGEEV_" + strings.ToUpper(stream) }

// DerivedSubjects is the derived stream's subject filter.
func DerivedSubjects(stream string) string { return "edgeev." + stream + ".>" }

// EventSubject is the subject of one event of agent and drone (routing
// key) in the derived stream: edgeev.<stream>.<agent>.<key>, the tokens
// escaped as in the source stream. It is also the subject filter of that
// drone for a consumer.
func EventSubject(stream, agent, routingKey string) string {
	return "edgeev." + stream + "." + wire.EscapeToken(agent) + "." + wire.KeyToken(routingKey)
}

// sourceFilters are the source subjects that hold packs.
func sourceFilters(stream string) []string {
	return []string{"edge." + stream + ".*.cut", "edge." + stream + ".*.part"}
}
