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
// escaped as in the source stream; the agent's own events (routing key =
// agent id, as in the health stream) have the key token OwnKeyToken
// instead of the agent's token a second time. It is also the subject
// filter of that drone for a consumer.
func EventSubject(stream, agent, routingKey string) string {
	a, k := wire.EscapeToken(agent), wire.KeyToken(routingKey)
	if k == a {
		k = OwnKeyToken
	}
	return "edgeev." + stream + "." + a + "." + k
}

// OwnKeyToken is the key token of an agent's own events: "@", which no
// routing key has as its token (wire.KeyToken escapes '@' as %40).
const OwnKeyToken = "@"

// sourceFilters are the source subjects that hold packs.
func sourceFilters(stream string) []string {
	return []string{"edge." + stream + ".*.cut", "edge." + stream + ".*.part"}
}
