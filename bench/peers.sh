#!/usr/bin/env bash
# The shared peers harness (../shared/bench-peers/run.sh) run against this
# checkout. The harness decodes both central layouts itself (a decoder
# written from the spec) and takes the agent's options from the
# environment: EDGE_MQTT_LISTEN=1 (the publisher speaks MQTT straight to
# the agent's --mqtt-listen, like for like with the NATS leaf's MQTT
# listener; default: through the edge Mosquitto) and EDGE_CENTRAL_LAYOUT
# (empty: the agent's default, layout 2; 1 or 2: --central-layout N). The
# rest (N, SIZE, PAYLOAD, DRONES, REPS_UP, FAULT_REPS, SEED, PEERS,
# SCENARIOS, OUT) is the harness's; see its header.
#   bench/peers.sh                                            # everything, agent defaults
#   EDGE_MQTT_LISTEN=1 PEERS="agent nats" SCENARIOS=up bench/peers.sh
set -euo pipefail
MAIN=$(cd "$(dirname "$0")/.." && pwd)
SHARED=${SHARED:-$MAIN/../shared/bench-peers}
[ -f "$SHARED/run.sh" ] || { echo "bench/peers.sh: no harness at $SHARED (set SHARED)"; exit 2; }
cd "$MAIN"
exec env MAIN="$MAIN" "$SHARED/run.sh"
