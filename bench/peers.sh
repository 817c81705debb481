#!/usr/bin/env bash
# The peers harness (../shared/bench-peers) with a consumer that reads both
# central layouts. The shared harness counts one JetStream data message per
# event: it reads layout 1 (the default with a central URL) as is, and sees
# none of layout 2's packed transactions. This copies it to $OUT/harness,
# applies bench/peers-consumer.patch (its agent consumer decodes every
# message with wire.DecodeMessage, and the agent runs with
# --central-layout $EDGE_CENTRAL_LAYOUT, default 2; with EDGE_MQTT_LISTEN=1
# the publisher speaks MQTT straight to the agent's listener, --mqtt-listen,
# like for like with the NATS leaf's MQTT listener, instead of through the
# edge Mosquitto), points its module at this checkout, and runs it with the
# same environment (N, PAYLOAD, DRONES, REPS_UP, FAULT_REPS, SEED, PEERS,
# SCENARIOS, OUT).
#   bench/peers.sh                                   # layout 2, everything
#   EDGE_CENTRAL_LAYOUT=1 PEERS=agent SCENARIOS=up bench/peers.sh
#   EDGE_MQTT_LISTEN=1 DRONES=8 PEERS="agent nats" SCENARIOS=up bench/peers.sh
set -euo pipefail
MAIN=$(cd "$(dirname "$0")/.." && pwd)
SHARED=${SHARED:-$MAIN/../shared/bench-peers}
[ -f "$SHARED/run.sh" ] || { echo "bench/peers.sh: no harness at $SHARED (set SHARED)"; exit 2; }
export OUT=${OUT:-/tmp/bench-peers}
export EDGE_CENTRAL_LAYOUT=${EDGE_CENTRAL_LAYOUT:-2}
export PATH=/usr/local/go/bin:$PATH
h=$OUT/harness
rm -rf "$h"
mkdir -p "$OUT"
cp -r "$SHARED" "$h"
chmod -R u+w "$h"
(cd "$h" && patch -s -p1 <"$MAIN/bench/peers-consumer.patch")
(cd "$h" && go mod edit -require github.com/edge-agent/edge-agent@v0.0.0 \
  -replace "github.com/edge-agent/edge-agent=$MAIN" && GOFLAGS=-mod=mod go mod tidy)
intake="through the edge Mosquitto"
[ "${EDGE_MQTT_LISTEN:-}" = 1 ] && intake="straight to the agent (--mqtt-listen)"
echo "bench/peers.sh: harness copy $h, agent central layout $EDGE_CENTRAL_LAYOUT, publisher $intake"
cd "$MAIN"
exec "$h/run.sh"
