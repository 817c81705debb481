#!/bin/sh
# intake-pairs.sh: each intake's whole benchmark (sockets, a real store),
# before and after, as alternating pairs: test binaries of both trees run
# one after the other, each its own process, the order swapped from pair
# to pair (before-after, after-before, ...). Prints one line a run:
#   pair order side intake metric value
# Ratio = after ÷ before within a pair; read the median of the pairs.
#
#   bench/intake-pairs.sh BEFORE_TREE AFTER_TREE [PAIRS]
#
# Builds the three test binaries of each tree into a temporary directory.
# The figures: MAVLink sim_intake_cpu_us/event (20 simulated drones × 50
# frames/s over UDP) and flood_intake_cpu_us/event (100 000 frames over
# TCP); RTP video cpu%/Mbit/s (25 × 6 Mbit/s pushed RTP); the MQTT
# listener's listen_ingest_us/msg (8 drones × 3000 QoS 1 messages).
set -eu
before=$1 after=$2 pairs=${3:-6}
bin=$(mktemp -d)
for side in before after; do
	eval tree=\$$side
	for p in mavlink video telemetry; do
		(cd "$tree" && go test -c -o "$bin/$p-$side.test" ./ingest/$p)
	done
done
run() { # side
	b=$bin
	(cd "$after/ingest/mavlink" && "$b/mavlink-$1.test" -test.run '^$' -test.bench 'BenchmarkMAVLinkIntake$' -test.benchtime 1x) |
		tr '\t' '\n' | awk -v s="$1" -v o="$order" -v p="$pair" '/(sim|flood)_intake_cpu_us\/event/ { print p, o, s, "mavlink", $2, $1 }'
	(cd "$after/ingest/video" && "$b/video-$1.test" -test.run '^$' -test.bench 'BenchmarkVideoIngest/streams=25/ingest' -test.benchtime 1x) |
		tr '\t' '\n' | awk -v s="$1" -v o="$order" -v p="$pair" '/ cpu%\/Mbit\/s/ { print p, o, s, "video", $2, $1 }'
	(cd "$after/ingest/telemetry" && EDGE_BENCH_ONLY=listen EDGE_BENCH_PAIRS=1 "$b/telemetry-$1.test" -test.run '^$' -test.bench 'BenchmarkListenIngest$' -test.benchtime 1x) |
		tr '\t' '\n' | awk -v s="$1" -v o="$order" -v p="$pair" '/listen_ingest_us\/msg/ { print p, o, s, "mqtt", $2, $1 }'
}
for pair in $(seq 1 "$pairs"); do
	if [ $((pair % 2)) -eq 1 ]; then order=before-after; run before; run after
	else order=after-before; run after; run before; fi
	echo "# load $(cut -d' ' -f1-3 /proc/loadavg)"
done
rm -rf "$bin"
