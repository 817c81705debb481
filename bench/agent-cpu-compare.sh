#!/usr/bin/env bash
# Alternating rounds of bench/agent-cpu.sh: an older agent checkout (OLD,
# its drone publishing through the edge Mosquitto, run by the unmodified
# shared harness) against this checkout with the drone straight to the
# agent (--mqtt-listen). Prints each round's CPU per event of the agent
# process, its ratio to the old one's, and the medians. Rounds alternate
# because the machine's load moves both by ±15 % from run to run: read the
# ratios, not the microseconds.
#   OLD=/path/to/checkout-of-4f88d1b ROUNDS=6 bench/agent-cpu-compare.sh
# N (100000), DRONES and PAYLOAD are passed to both; SHARED is the harness
# (default ../shared/bench-peers next to this checkout).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
: "${OLD:?set OLD to a checkout of the agent to compare with (e.g. 4f88d1b, before issue 17)}"
OLD=$(cd "$OLD" && pwd)
export SHARED=${SHARED:-$here/../shared/bench-peers}
SHARED=$(cd "$SHARED" && pwd)
ROUNDS=${ROUNDS:-5}
out=${OUT:-/tmp/bench-agent-cpu-compare}
cpu() { awk '/^edge-agent +CPU/ { print $(NF-3) }'; }
olds=() news=() ratios=()
for r in $(seq 1 "$ROUNDS"); do
  o=$(MAIN=$OLD RUNNER=$SHARED/run.sh OUT=$out/old "$here/bench/agent-cpu.sh" | cpu)
  n=$(MAIN=$here EDGE_MQTT_LISTEN=1 OUT=$out/new "$here/bench/agent-cpu.sh" | cpu)
  ratio=$(awk -v o="$o" -v n="$n" 'BEGIN { printf "%.2f", n/o }')
  olds+=("$o") news+=("$n") ratios+=("$ratio")
  echo "round $r (load $(cut -d' ' -f1 /proc/loadavg)): old $o us, this checkout $n us per event: ${ratio}x"
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2 }'; }
echo "median: old $(median "${olds[@]}") us, this checkout $(median "${news[@]}") us per event;" \
  "ratio median $(median "${ratios[@]}")x, per round $(printf '%s\n' "${ratios[@]}" | sort -g | head -1)-$(printf '%s\n' "${ratios[@]}" | sort -g | tail -1)x"
