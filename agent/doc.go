// Package agent wires an edge-agent together and runs it: the local store
// (localstream), the intakes (ingest/video, ingest/telemetry), host health and
// disk pressure (devices), replication to the central JetStream (sync) and the
// HTTP listener with /healthz, /status, /metrics and the status page.
//
// Config is the whole YAML file: NewDefaultConfig returns it at its defaults
// (agent.example.yaml shows the same), Validate names the field to change in
// every error. New checks a Config and resolves the agent id, starting
// nothing; Run opens the store, starts replication, the intakes and the HTTP
// listener, and when its context ends stops them in pipeline order — intakes
// first, then writer marks, the final commit within
// central.shutdown_timeout, and the store last — so that nothing
// acknowledged is lost. Every log line, error and response leaves without the
// configured secrets. The design and the rules the parts keep are in
// docs/design.md; cmd/edge-agent is the CLI around this package.
package agent
