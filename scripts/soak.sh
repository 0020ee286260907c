#!/usr/bin/env bash
# Soak test: one `tinyserve serve` process under mixed load (streaming, non-streaming, chat,
# clients that disconnect mid-stream or before the first token, bad requests) for DURATION
# seconds, its resident memory (VmRSS) sampled every second.
#
#   scripts/soak.sh [DURATION]        default 600 s; run from the repository root
#   env: TINYSERVE_BIN (build/bin/tinyserve), SOAK_LOAD (build/bin/soak_load),
#        TINYSERVE_MODEL (../shared/models/stories260K.bin), SOAK_CONCURRENCY (16),
#        SOAK_OUT (a temporary folder: server.log, rss.csv, load.log),
#        SOAK_HEAP_EVERY (0: off; N: every N seconds gdb attaches to the server for a moment and
#        calls glibc's malloc_stats(), whose totals go to heap.csv as t_s,system_kib,in_use_kib:
#        the bytes malloc has handed out and not had back, which tells a leak (in use grows with
#        the requests) from the allocator keeping pages (system grows, in use flat); needs gdb
#        and ptrace rights, and each sample stops the server for ~0.4 s with its 520 threads),
#        SOAK_HEAP_PROFILE (a folder: the server runs under tcmalloc's heap profiler, gperftools'
#        libtcmalloc.so.4 from Debian's google-perftools, which writes its live heap by allocation
#        site to DIR/prof.NNNN.heap every SOAK_HEAP_PROFILE_EVERY seconds (300); compare two dumps
#        with `google-pprof --text --base=DIR/prof.0002.heap BIN DIR/prof.0012.heap`; the RSS is
#        then tcmalloc's, not glibc's)
#
# Pass/fail rule (exit 0 iff all hold):
#   1. no crash: the server is alive at the end, /health answers 200, and it exits 0 on SIGTERM;
#   2. the load driver saw no unexpected answer (every request got its expected status; streams
#      ended with [DONE]; bad requests got their 4xx JSON error);
#   3. no leak of engine state: once the load stops, /metrics shows 0 used KV blocks and 0 running
#      or waiting requests;
#   4. no RSS growth trend after warm-up: over the second half of the run (the first half is
#      warm-up), the least-squares line through the RSS samples rises by less than
#      max(4 MiB, 5% of the mean RSS of that half) across the half.
# It prints the samples' summary (RSS at start, max, slope over the second half in KiB/s, the
# fitted growth) and the verdict.
set -euo pipefail

DURATION=${1:-600}
BIN=${TINYSERVE_BIN:-build/bin/tinyserve}
LOAD=${SOAK_LOAD:-build/bin/soak_load}
MODEL=${TINYSERVE_MODEL:-../shared/models/stories260K.bin}
CONCURRENCY=${SOAK_CONCURRENCY:-16}
OWN_OUT=0  # the folder is ours (not SOAK_OUT): removed after a pass, kept (and named) after a failure
if [[ -z ${SOAK_OUT:-} ]]; then OWN_OUT=1; fi
OUT=${SOAK_OUT:-$(mktemp -d /tmp/tinyserve-soak.XXXXXX)}
mkdir -p "$OUT"
for f in "$BIN" "$LOAD" "$MODEL"; do
  [[ -e $f ]] || { echo "soak: $f not found" >&2; exit 2; }
done

SERVER_ENV=()
if [[ -n ${SOAK_HEAP_PROFILE:-} ]]; then
  TCMALLOC=$(ls /usr/lib/*/libtcmalloc.so.4 2>/dev/null | head -n 1 || true)
  [[ -n $TCMALLOC ]] || { echo "soak: SOAK_HEAP_PROFILE needs libtcmalloc.so.4 (google-perftools)" >&2; exit 2; }
  mkdir -p "$SOAK_HEAP_PROFILE"
  SERVER_ENV=(env LD_PRELOAD="$TCMALLOC" HEAPPROFILE="$SOAK_HEAP_PROFILE/prof"
    HEAP_PROFILE_TIME_INTERVAL="${SOAK_HEAP_PROFILE_EVERY:-300}" HEAP_PROFILE_ALLOCATION_INTERVAL=0
    HEAP_PROFILE_INUSE_INTERVAL=0)
fi

# A small KV cache (preemptions) and a modest worker pool.
"${SERVER_ENV[@]}" "$BIN" serve --model "$MODEL" --port 0 --num-kv-blocks 48 --max-num-seqs 32 \
  2>"$OUT/server.log" &
SERVER=$!
cleanup() { kill "$SERVER" 2>/dev/null || true; }
trap cleanup EXIT

PORT=""
for _ in $(seq 1 300); do
  PORT=$(sed -n 's|.*serving .* on http://[0-9.]*:\([0-9]*\) .*|\1|p' "$OUT/server.log" | head -1)
  [[ -n $PORT ]] && break
  kill -0 "$SERVER" 2>/dev/null || { echo "soak: the server did not start" >&2; cat "$OUT/server.log" >&2; exit 1; }
  sleep 0.1
done
[[ -n $PORT ]] || { echo "soak: no port in the server log" >&2; exit 1; }
echo "soak: server pid $SERVER on port $PORT, ${DURATION} s of load, samples in $OUT/rss.csv"

# RSS sampler: "seconds,kib" every second while the load runs.
echo "t_s,rss_kib" >"$OUT/rss.csv"
(
  t=0
  while kill -0 "$SERVER" 2>/dev/null; do
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$SERVER/status" 2>/dev/null || true)
    [[ -n $rss ]] && echo "$t,$rss" >>"$OUT/rss.csv"
    sleep 1
    t=$((t + 1))
    [[ $t -gt $DURATION ]] && break
  done
) &
SAMPLER=$!

# Heap sampler (SOAK_HEAP_EVERY): malloc_stats() writes its report to the server's stderr, so
# each sample is the "Total (incl. mmap)" block that follows the last marker line in server.log.
HEAP_EVERY=${SOAK_HEAP_EVERY:-0}
HEAP_SAMPLER=""
heap_sample() {  # T FILE: one "t,system_kib,in_use_kib" line appended to FILE
  local before
  before=$(wc -l <"$OUT/server.log")
  # (gdb may exit non-zero after the call: "Couldn't write extended state status" on AVX-512
  # machines, for the caller-saved vector registers of the thread it borrowed, which sits in a
  # system call; the report is written all the same.)
  gdb -q -batch -p "$SERVER" -ex 'call ((void (*)(void))malloc_stats)()' >/dev/null 2>&1 || true
  tail -n +"$((before + 1))" "$OUT/server.log" | awk -v t="$1" '
    /^Total \(incl. mmap\):/ { total = 1; next }
    total && /^system bytes/ { sys = $NF }
    total && /^in use bytes/ { use = $NF; printf "%d,%d,%d\n", t, sys / 1024, use / 1024; exit }
  ' >>"$2"
}
if [[ $HEAP_EVERY -gt 0 ]]; then
  command -v gdb >/dev/null || { echo "soak: SOAK_HEAP_EVERY needs gdb" >&2; exit 2; }
  echo "t_s,system_kib,in_use_kib" >"$OUT/heap.csv"
  (
    t0=$(date +%s)
    next=0
    while [[ ! -e $OUT/load.done ]] && kill -0 "$SERVER" 2>/dev/null; do
      t=$(($(date +%s) - t0))
      if [[ $t -ge $next ]]; then
        heap_sample "$t" "$OUT/heap.csv"
        next=$((t + HEAP_EVERY))
      fi
      sleep 1
    done
  ) &
  HEAP_SAMPLER=$!
fi

LOAD_RC=0
"$LOAD" --port "$PORT" --duration "$DURATION" --concurrency "$CONCURRENCY" >"$OUT/load.log" 2>&1 || LOAD_RC=$?
wait "$SAMPLER" || true
if [[ -n $HEAP_SAMPLER ]]; then
  touch "$OUT/load.done"
  wait "$HEAP_SAMPLER" || true
  heap_sample "$DURATION" "$OUT/heap_after.csv"  # what stays in use once the load is over
fi
tail -n 8 "$OUT/load.log"

FAIL=0
verdict() { echo "soak: FAIL: $*"; FAIL=1; }

# 1. Alive; 3. healthy and idle once the load stops (aborted requests finish within a step).
if ! kill -0 "$SERVER" 2>/dev/null; then
  verdict "the server died"; tail -n 20 "$OUT/server.log"
elif ! "$LOAD" --port "$PORT" --check-idle; then
  verdict "/health is not 200, or KV blocks or requests are left after the load"
fi
# 2. The driver's verdict.
[[ $LOAD_RC -eq 0 ]] || verdict "the load driver saw unexpected answers (see $OUT/load.log)"
# 4. The RSS trend over the second half.
# trend FILE COLUMN: "n first max second_half_mean slope growth limit" of column COLUMN (2 or
# more) against column 1 (seconds): the least-squares line over the second half of the samples.
trend() {
  awk -F, -v c="$2" 'BEGIN { n = 0 }
  NR > 1 { t[n] = $1; r[n] = $c; n++ }
  END {
    if (n < 4) { print n, 0, 0, 0, 0, 0, 0; exit }
    max = 0; for (i = 0; i < n; i++) if (r[i] > max) max = r[i]
    h = int(n / 2); m = n - h; st = 0; sr = 0
    for (i = h; i < n; i++) { st += t[i]; sr += r[i] }
    mt = st / m; mr = sr / m; num = 0; den = 0
    for (i = h; i < n; i++) { num += (t[i] - mt) * (r[i] - mr); den += (t[i] - mt) ^ 2 }
    slope = den > 0 ? num / den : 0
    growth = slope * (t[n - 1] - t[h])
    limit = 0.05 * mr; if (limit < 4096) limit = 4096
    printf "%d %d %d %.0f %.3f %.0f %.0f\n", n, r[0], max, mr, slope, growth, limit
  }' "$1"
}
read -r N START MAX MEAN SLOPE GROWTH LIMIT < <(trend "$OUT/rss.csv" 2)
echo "soak: $N RSS samples: start ${START} KiB, max ${MAX} KiB, second-half mean ${MEAN} KiB," \
  "slope ${SLOPE} KiB/s, fitted growth over the second half ${GROWTH} KiB (limit ${LIMIT} KiB)"
[[ $N -ge 4 ]] || verdict "too few RSS samples ($N)"
awk -v g="$GROWTH" -v l="$LIMIT" 'BEGIN { exit !(g < l) }' || verdict "RSS grows after warm-up"
if [[ -n $HEAP_SAMPLER ]]; then  # reported, not judged: the RSS rule above is the verdict
  read -r HN HSTART HMAX HMEAN HSLOPE HGROWTH _ < <(trend "$OUT/heap.csv" 3)
  read -r _ SSTART SMAX _ SSLOPE SGROWTH _ < <(trend "$OUT/heap.csv" 2)
  HAFTER=$(cut -d, -f3 "$OUT/heap_after.csv" 2>/dev/null || true)
  echo "soak: $HN heap samples: in use ${HSTART} KiB at start, max ${HMAX} KiB, second-half mean" \
    "${HMEAN} KiB, slope ${HSLOPE} KiB/s (fitted growth ${HGROWTH} KiB), ${HAFTER:-?} KiB" \
    "after the load; malloc's system bytes ${SSTART} KiB at start, max" \
    "${SMAX} KiB, slope ${SSLOPE} KiB/s (fitted growth ${SGROWTH} KiB)"
fi
if [[ -n ${SOAK_HEAP_PROFILE:-} ]]; then  # each dump's first line: "heap profile: OBJECTS: BYTES [..."
  echo "soak: tcmalloc's live heap at each dump (objects: bytes):" \
    "$(head -qn 1 "$SOAK_HEAP_PROFILE"/prof.*.heap 2>/dev/null | awk '{ printf "%s%s %s", sep, $3, $4; sep = ", " }')"
fi

# 1 (cont.). A clean exit on SIGTERM.
kill -TERM "$SERVER"
SERVER_RC=0
wait "$SERVER" || SERVER_RC=$?
trap - EXIT
[[ $SERVER_RC -eq 0 ]] || verdict "the server exited with $SERVER_RC on SIGTERM"

if [[ $FAIL -eq 0 ]]; then
  echo "soak: PASS"
  if [[ $OWN_OUT -eq 1 ]]; then rm -rf "$OUT"; fi
else
  echo "soak: logs in $OUT"
  exit 1
fi
