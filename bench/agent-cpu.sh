#!/usr/bin/env bash
# The agent's CPU per event in the peers harness: runs bench/peers.sh with
# PEERS=agent SCENARIOS=up REPS_UP=1 (the rest of the environment as given:
# N, DRONES, PAYLOAD, EDGE_MQTT_LISTEN, EDGE_CENTRAL_LAYOUT, OUT) and reads
# the edge-agent process's user+system CPU from /proc/<pid>/stat every
# 0.2 s until it exits; prints the last reading over N, and the same for the
# edge Mosquitto and the harness's publisher/consumer process.
# RUNNER runs another harness (the unmodified shared one, for an older
# agent checkout given as MAIN). For the agent it also prints the system
# share and the minor page faults per event (each a trip into the kernel:
# on a paravirtualised guest that is where much of the CPU goes).
#   DRONES=8 bench/agent-cpu.sh
#   EDGE_MQTT_LISTEN=1 DRONES=8 bench/agent-cpu.sh
#   MAIN=/path/to/old/checkout RUNNER=../shared/bench-peers/run.sh bench/agent-cpu.sh
set -euo pipefail
export MAIN=${MAIN:-$(cd "$(dirname "$0")/.." && pwd)}
RUNNER=${RUNNER:-$MAIN/bench/peers.sh}
export OUT=${OUT:-/tmp/bench-agent-cpu} N=${N:-100000} PEERS=agent SCENARIOS=up REPS_UP=1
log=$OUT/agent-cpu.log
mkdir -p "$OUT"
(cd "$MAIN" && "$RUNNER") >"$log" 2>&1 &
run=$!
hz=$(getconf CLK_TCK)
declare -A last
agent_sys=0 agent_flt=0
sample() {
  local p name st
  for p in $(pgrep -f "$OUT/bin/(edge-agent|peerbench)|mosquitto.*$OUT/scratch" || true); do
    name=$(cat /proc/$p/comm 2>/dev/null) || continue
    [ "$name" = peerbench ] && ! grep -q -- '-peer' /proc/$p/cmdline 2>/dev/null && continue
    st=$(cat /proc/$p/stat 2>/dev/null) || continue
    last[$name]=$(awk '{print $14+$15}' <<<"$st")
    if [ "$name" = edge-agent ]; then
      agent_sys=$(awk '{print $15}' <<<"$st") agent_flt=$(awk '{print $10}' <<<"$st")
    fi
  done
}
while kill -0 $run 2>/dev/null; do sample; sleep 0.2; done
wait $run || { cat "$log"; exit 1; }
grep '^RESULT' "$log" | cut -c1-220
for name in edge-agent mosquitto peerbench; do
  t=${last[$name]:-0}
  awk -v t="$t" -v hz="$hz" -v n="$N" -v name="$name" 'BEGIN { printf "%-10s CPU %.2f s, %.1f us per event\n", name, t/hz, t/hz/n*1e6 }'
done
awk -v s="$agent_sys" -v f="$agent_flt" -v hz="$hz" -v n="$N" 'BEGIN { printf "edge-agent system %.1f us per event, %.2f minor faults per event\n", s/hz/n*1e6, f/n }'
