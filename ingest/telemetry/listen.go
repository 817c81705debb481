package telemetry

import (
	"net"

	"github.com/edge-agent/edge-agent/ingest/telemetry/internal/dedup"
	"github.com/edge-agent/edge-agent/ingest/telemetry/mqttlisten"
)

// listenPipeline is the Ingester as the listener sees it
// (mqttlisten.Pipeline): the budget, one delivery at a time, the failure.
// The listener owns its protocol, bounds and counters (Stats copies
// them); docs/telemetry.md says why it is hand-written.
type listenPipeline struct{ in *Ingester }

func (p listenPipeline) Reserve(m *mqttlisten.Message) bool { return p.in.reserve(msgBytes(m)) }

func (p listenPipeline) Deliver(m *mqttlisten.Message, ack func(), d dedup.Source) {
	p.in.deliverMu.Lock()
	defer p.in.deliverMu.Unlock()
	p.in.deliver(m, ack, d, false)
}

func (p listenPipeline) Fail(err error) { p.in.fail(err) }

// ListenAddr is the listener's bound address (nil without Listen, or
// before Run bound it; Subscribed() is closed after that when there is no
// broker). Safe for concurrent use.
func (in *Ingester) ListenAddr() *net.TCPAddr {
	if in.listener == nil {
		return nil
	}
	return in.listener.Addr()
}
