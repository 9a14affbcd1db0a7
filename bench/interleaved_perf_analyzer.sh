#!/bin/bash
# Several servers up at once on the same model, driven by perf_analyzer in interleaved
# rounds (each round visits every server), so a noisy shared host shifts all of them
# alike; prints the median throughput per server, protocol and concurrency.
#
#   bench/interleaved_perf_analyzer.sh ROUNDS "CONCURRENCIES" "PROTOCOLS" REPO "FLAGS" [REPO "FLAGS" ...]
#   TRITON=/path/to/repo also starts ../shared/tools/tritonserver on that repository.
#
# e.g. the Python backend's add_sub in process mode and in-process vs Triton 2.51:
#   TRITON=repo_proc bench/interleaved_perf_analyzer.sh 3 "1 8" "http grpc" repo_proc "" repo_inproc ""
# MODEL (default add_sub) and SHAPES (default INPUT0/INPUT1 1,16) select the model.
set -u
cd "$(dirname "$0")/.."
ROUNDS=$1 CONCS=$2 PROTOS=$3
shift 3
MODEL=${MODEL:-add_sub}
SHAPES=${SHAPES:-"--shape INPUT0:1,16 --shape INPUT1:1,16"}
OUT=$(mktemp)
PIDS=() PORTS=() NAMES=()
# A server left running on a port would answer in place of the one started here (which
# fails to bind only after the readiness check has passed): refuse to start.
refuse_taken() {
  for p in "$@"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "port $p is already in use; stop what listens there first" >&2
      kill "${PIDS[@]}" 2>/dev/null
      exit 1
    fi
  done
}
k=0
while [ $# -gt 1 ]; do
  port=$((19600 + k * 10))
  refuse_taken $port $((port + 1)) $((port + 2))
  # shellcheck disable=SC2086  # FLAGS is a list of flags
  .venv/bin/despina serve --model-repository "$1" $2 --http-port $port \
    --grpc-port $((port + 1)) --metrics-port $((port + 2)) > "$OUT.server$k.log" 2>&1 &
  PIDS+=($!) PORTS+=($port) NAMES+=("despina:$1${2:+ $2}")
  k=$((k + 1))
  shift 2
done
if [ -n "${TRITON:-}" ]; then
  refuse_taken 19700 19701 19702
  ../shared/tools/tritonserver --model-repository "$TRITON" --http-port 19700 \
    --grpc-port 19701 --metrics-port 19702 > "$OUT.triton.log" 2>&1 &
  PIDS+=($!) PORTS+=(19700) NAMES+=("triton:$TRITON")
fi
trap 'kill "${PIDS[@]}" 2>/dev/null; wait' EXIT
for i in "${!PORTS[@]}"; do
  for _ in $(seq 120); do curl -sf "localhost:${PORTS[$i]}/v2/health/ready" && break; sleep 1; done
  # a server that failed (a port already taken) must not be measured through another one
  if ! kill -0 "${PIDS[$i]}" 2>/dev/null; then
    echo "${NAMES[$i]} is not running; its log:" >&2
    tail -5 "$OUT.server$i.log" "$OUT.triton.log" 2>/dev/null >&2
    exit 1
  fi
done
for _ in $(seq "$ROUNDS"); do
  for proto in $PROTOS; do
    for c in $CONCS; do
      for i in "${!PORTS[@]}"; do
        port=${PORTS[$i]}
        [ "$proto" = grpc ] && port=$((port + 1))
        # shellcheck disable=SC2086
        rate=$(timeout 120 ../shared/tools/perf_analyzer -m "$MODEL" -u "127.0.0.1:$port" \
          -i "$proto" --concurrency-range "$c" $SHAPES -p 3000 -r 4 -s 100 2>&1 |
          grep -oP 'Throughput: \K[0-9.]+' | tail -1)
        echo "$i $proto $c ${rate:-0}" >> "$OUT"
      done
    done
  done
done
python3 - "$OUT" "${NAMES[@]}" <<'PY'
import collections, statistics, sys
names = sys.argv[2:]
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    index, proto, conc, rate = line.split()
    runs[(proto, int(conc), int(index))].append(float(rate))
triton = next((i for i, n in enumerate(names) if n.startswith("triton:")), None)
# Each round visits every server back to back, so a ratio within a round shares the
# host's noise of the moment: the median of those is the steadier comparison.
print("| server | protocol | c | median infer/s | runs | x Triton (median of rounds) |")
print("| --- | --- | ---: | ---: | --- | ---: |")
for (proto, conc, index), rates in sorted(runs.items()):
    shown = ", ".join(f"{r:.0f}" for r in rates)
    ratio = ""
    if triton is not None and index != triton:
        ratios = [r / t for r, t in zip(rates, runs[(proto, conc, triton)]) if t]
        ratio = f"{statistics.median(ratios):.2f}" if ratios else "-"
    print(f"| {names[index]} | {proto} | {conc} | {statistics.median(rates):.0f} | {shown} | {ratio} |")
PY
