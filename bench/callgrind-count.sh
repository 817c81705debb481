#!/bin/sh
# callgrind-count.sh: instructions per event of one benchmark, counted by
# callgrind (user-space instructions: repeatable on a loaded machine,
# where CPU time is not). The benchmark runs twice, with N1 and N2
# iterations (-benchtime Nx); the difference of the two counts divided by
# the events between them leaves out setup and warm-up.
#
#   bench/callgrind-count.sh TESTBIN PKGDIR BENCH EVENTS_PER_OP N1 N2 [TOGGLE]
#
# TESTBIN: a test binary (go test -c); PKGDIR: the directory it runs in
# (its testdata); BENCH: -test.bench's pattern; EVENTS_PER_OP: events of
# one iteration; TOGGLE: count only inside this function (its full
# symbol name, e.g. 'github.com/edge-agent/edge-agent/ingest/mavlink.(*Intake).consume'),
# else the whole process. Prints "instructions/event N" and both counts.
# With CG_VARY=NAME, N1 and N2 are values of the environment variable
# NAME for a benchmark that runs once (-benchtime 1x) and sizes itself
# from it (EDGE_BENCH_MSGS for BenchmarkListenIngest); EVENTS_PER_OP is
# then the events per unit of NAME. With CG_DUMP_EVERY=B, callgrind
# writes its counts every B basic blocks and the parts are summed: for a
# run whose end valgrind does not survive (callgrind 3.19 asserts on a
# signal that arrives in another's handler, as a benchmark's child
# exiting can make it), the count is then all but the last part's tail.
#
# Go under valgrind 3.19: GODEBUG=asyncpreemptoff=1 (callgrind asserts on
# the preemption signal) and cpu.rdtscp=off (the runtime's cputicks, on a
# contended runtime lock, would run an RDTSCP that valgrind does not
# decode: SIGILL at a random point); GOGC=off (no collector cycles in the
# count; CG_GOGC=100 counts them); GOMAXPROCS=1.
set -eu
bin=$1 dir=$2 bench=$3 per=$4 n1=$5 n2=$6 toggle=${7:-}
out=$(mktemp -d)
count() {
	if [ -n "$toggle" ]; then set -- --toggle-collect="$toggle"; else set --; fi
	if [ -n "${CG_DUMP_EVERY:-}" ]; then set -- "$@" --dump-every-bb="$CG_DUMP_EVERY"; fi
	times=${n}x
	if [ -n "${CG_VARY:-}" ]; then
		export "$CG_VARY=$n"
		times=1x
	fi
	(cd "$dir" && GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off GOGC=${CG_GOGC:-off} GOMAXPROCS=1 \
		valgrind --tool=callgrind --callgrind-out-file="$out/cg.$n" "$@" \
		"$bin" -test.run '^$' -test.bench "$bench" -test.benchtime "$times" >"$out/log.$n" 2>&1) || true
	for part in "$out/cg.$n" "$out/cg.$n".*; do
		[ -f "$part" ] && sed -n 's/^summary: *//p; s/^totals: *//p' "$part" | head -1
	done | awk '{ s += $1 } END { if (NR) print s }'
}
n=$n1; c1=$(count)
n=$n2; c2=$(count)
if [ -z "$c1" ] || [ -z "$c2" ]; then
	echo "callgrind-count: no counts (logs in $out)" >&2
	exit 1
fi
awk -v c1="$c1" -v c2="$c2" -v n1="$n1" -v n2="$n2" -v per="$per" \
	'BEGIN { printf "instructions/event %.1f  (%s Ir at %sx, %s Ir at %sx, %s events/op)\n", (c2-c1)/((n2-n1)*per), c1, n1, c2, n2, per }'
rm -rf "$out"
