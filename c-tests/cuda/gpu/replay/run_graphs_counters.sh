#!/usr/bin/env bash
# kreplay-cuda-replay on graph-based programs (issue 29) and with hardware counters (issue 30), built and run in
# one go on a machine with an NVIDIA GPU, from the repository root:
#
#   c-tests/cuda/gpu/replay/run_graphs_counters.sh PREBUILT_DIR OUT_DIR
#
# Same requirements as run_replay.sh (and Nsight Compute's ncu for the counters). Sections, each skipped when its
# variable is 0:
#   KREPLAY_RUN_NATIVE    graphs.cu: a graph of every node kind node mode runs, changed in place between launches
#                         (step), and a graph with a conditional while node (while); in node mode and graph mode
#   KREPLAY_RUN_GRAPH_COST graphs.cu cost: a graph of 16 kernel nodes and a stream launch that rewrite the same
#                         87 MB of a 320 MB footprint, in graph mode at 5 passes on each tier (no --verify): a
#                         graph's extra pass against the stream launch's, at equal footprint and written bytes
#   KREPLAY_RUN_CUDAGRAPH torch_prog.py cudagraph (a torch.cuda.graph training loop), 4 steps, in the modes of
#                         KREPLAY_CUDAGRAPH_MODES (default "node graph"); the cost figures: a kernel node's median
#                         extra pass against the stream launches' (the same kernels in its warm-up steps), a whole
#                         graph's against its own time and (graph mode) against a stream kernel right after each
#                         graph launch whose restores copy the same runs (KREPLAY_CUDAGRAPH_TWIN_RUNS) and which runs
#                         about as long (KREPLAY_CUDAGRAPH_TWIN_SPIN); then (unless KREPLAY_CUDAGRAPH_COUNTED=0) the
#                         kernel nodes counted against ncu's node mode
#   KREPLAY_RUN_TWIN_SPLIT (off unless 1) the torch.cuda.graph loop in graph mode with that stream kernel, on each
#                         tier of KREPLAY_TWIN_TIERS (device), at KREPLAY_TWIN_PASSES (9) passes,
#                         KREPLAY_TWIN_TAKES (3) runs of 12 steps per copy method of
#                         KREPLAY_TWIN_COPY_METHODS (automatic), layout of KREPLAY_TWIN_LAYOUTS ("graph": the
#                         graph's runs, the default; "one": 87 MB in one run) and length of KREPLAY_TWIN_SPINS
#                         (700: about the graph's; 0: an elementwise kernel): the restores split into device ops
#                         and the rest and by copy sizes (restore_split.py), and each graph launch's extra pass
#                         against the stream kernel's right after it
#   KREPLAY_RUN_SIDE      ResNet-18, KREPLAY_SIDE_STEPS (default 1) steps, every launch, 15 metrics (with
#                         KREPLAY_SIDE_SET=warps: the launcher's --set warps, 33 metrics of the SMs): kreplay in
#                         kernel and range mode, --backend cupti-kernel-replay and ncu, each timed whole, the
#                         values compared in pairs (KREPLAY_NCU=0: no ncu, KREPLAY_SIDE_CUPTI=0: no CUPTI kernel
#                         replay, KREPLAY_SIDE_KERNEL=0: no kernel mode, KREPLAY_SIDE_RANGE=0: no range mode;
#                         KREPLAY_RANGE_KINDS, default "auto": range mode's --profiler-ranges, one run each);
#                         kreplay's kernel mode logs each launch's time by phase (phases.py)
#   KREPLAY_RUN_COMPILED  torch_prog.py compiled (torch.compile mode="reduce-overhead": Inductor's forward and
#                         backward are CUDA graphs), 6 steps, then 2 with the same Triton kernels on the stream
#   KREPLAY_RUN_XLA       jax_prealloc.py with XLA's command buffers on (its default), preallocation off; first,
#                         with KREPLAY_XLA_TRACE=1, a run under KREPLAY_INJECT_LOG=trace
#   For each: the plain run's checksum; every launch (stream and graph) replayed at 3 passes on the host tier with
#   --verify and on the device tier (at KREPLAY_GRAPH_DEVICE_PASSES, default 3, which the cudagraph section sets
#   to KREPLAY_CUDAGRAPH_COST_PASSES, default 9), each checksum equal to the plain run's, no graph launch
#   left run-once; the no-restore control differs. KREPLAY_GRAPH_MODES (default "node") lists the
#   --graph-profiling modes each runs (KREPLAY_COMPILED_MODES, KREPLAY_XLA_MODES: for one of them);
#   KREPLAY_GRAPH_TIERS (default "host device") the tiers (the control needs host).
#   KREPLAY_RUN_COUNTERS  ResNet-18, 1 step, the first KREPLAY_COUNTER_LAUNCHES (default 60) launches: kreplay's
#                         --metrics against ncu (--replay-mode kernel --cache-control all --clock-control none) on
#                         the same launches and metrics (counters_compare.py), and the checksum equal to the plain
#                         run's: four count metrics, then a list of 15 that needs 10 passes (ncu runs that one).
#   KREPLAY_RUN_SET       --set full on ResNet-18's first launches: the summary, the checksum, the CSV in pandas
#   KREPLAY_RUN_PROBE     bench/range_profiler_probe.cu: CUPTI's Range Profiler call by call, and which ways of
#                         calling it work; then the kernel-mode launches alone for each metric list of
#                         KREPLAY_PROBE_LISTS (space-separated)
#   KREPLAY_RUN_LIST      --list-metrics: the chip's metrics (with the CUPTI on the loader's path, else PyTorch's
#                         or the toolkit's through KREPLAY_CUPTI_PATH)
# OUT_DIR receives graphs_counters.tar.gz and summary.txt; the exit status is 1 when a check failed.
set -u -o pipefail

src=$(cd "$(dirname "$0")" && pwd)
source "$src/../setup.sh"
kreplay_gpu_args "run_graphs_counters.sh PREBUILT_DIR OUT_DIR" "$@"
kreplay_replay_begin graphs_counters

{
  kreplay_gpu_describe name,driver_version,memory.total,clocks.sm,clocks.max.sm
  python3 -c 'import torch, jax; print("torch", torch.__version__, "jax", jax.__version__)' 2>&1
  command -v ncu && ncu --version | tail -1
} >"$work/env.log" 2>&1
kreplay_replay_launcher "kreplay_cuda_inject kreplay_cuda_replay replay_graphs"
graphs_program=$(find "$build" -name replay_graphs -type f | head -1)

# The checksum of ResNet-18's one plain step (the counters and the set sections compare with it), run once.
resnet_plain() {
  [[ -f $work/resnet.plain.log ]] || KREPLAY_PROG_STEPS=1 run "$work/resnet.plain.log" python3 "$src/torch_prog.py" resnet >/dev/null
  sed -n 's/^CHECKSUM //p' "$work/resnet.plain.log" | tail -1
}

# The runs (MiB) that a graph launch's restores copy on the torch.cuda.graph loop (torch_prog.py cudagraph), read
# from the copy-batch log on the H200, 2026-12-04 (c): one of 34 MiB (to the copy engines), eight making 47 MiB and
# four small ones (to the gather kernel). torch_prog.py's stream kernel changes runs of these sizes
# (KREPLAY_PROG_TWIN_RUNS) for graph mode's cost against a stream launch whose restores copy the same.
graph_runs=34$(printf ',5.875%.0s' {1..8})$(printf ',0.25%.0s' {1..4})

# same_length NAME REPORT SPIN: the own times of the graph launches and of the stream kernels after them; with SPIN
# (multiply-adds per element, KREPLAY_PROG_TWIN_SPIN) above 0 the kernel is meant to run as long as a graph launch,
# and a verdict checks that it does within a quarter.
same_length() {
  local graph_ms twin_ms
  graph_ms=$(csv_figure "$2" graph_kernel_ms) twin_ms=$(csv_figure "$2" twin_kernel_ms)
  row "INFO $1: own time, graph launch $graph_ms ms, stream kernel $twin_ms ms"
  [[ $3 == 0 ]] || verdict "$1: the stream kernel runs about as long as a graph launch ($twin_ms against $graph_ms ms, within a quarter)" \
    python3 -c 'import sys; r = float(sys.argv[1]) / float(sys.argv[2]); sys.exit(not 0.8 <= r <= 1.25)' "$twin_ms" "$graph_ms"
}

# twin_split_case TIER METHOD LAYOUT SPIN: KREPLAY_RUN_TWIN_SPLIT's runs on one tier for one copy method, stream
# kernel layout ("one", "graph" or a comma list of MiB) and length (multiply-adds per element), at $twin_passes
# passes, against the plain run's $plain.
twin_split_case() {
  local tier=$1 method=$2 layout=$3 twin_spin=$4 twin_runs label take name sum pairs_now pair_median what
  local graph_takes=() twin_takes=() pairs=()
  case $layout in
    one) twin_runs= ;;
    graph) twin_runs=$graph_runs ;;
    *) twin_runs=$layout ;;
  esac
  label=twin_split.$tier.$method.$(echo "$layout" | tr -c 'a-z0-9\n' _)
  [[ $twin_spin != 0 ]] && label+=.spin$twin_spin
  row "INFO $label: $twin_passes passes; the stream kernel's runs (MiB): ${twin_runs:-87 in one}; multiply-adds per element: $twin_spin"
  for take in $(seq "${KREPLAY_TWIN_TAKES:-3}"); do
    name=$label.$take
    sum=$(KREPLAY_PROG_STEPS=$twin_steps KREPLAY_PROG_EAGER_STEPS=2 KREPLAY_PROG_TWIN_MB=87 KREPLAY_INJECT_LOG=info \
          KREPLAY_PROG_TWIN_RUNS=$twin_runs KREPLAY_PROG_TWIN_SPIN=$twin_spin KREPLAY_INJECT_COPY_METHOD=$method \
          run "$work/$name.log" "$launcher" --graph-profiling graph --passes "$twin_passes" \
          --tier "$tier" --progress 10 -o "$work/$name.csv" -- python3 "$src/torch_prog.py" cudagraph)
    verdict "$name: checksum ${sum:-none} == $plain" test -n "$sum" -a "$sum" = "$plain"
    verdict "$name: the copy batches moved by the $method method" \
      grep -q "copy batches by the $method method" "$work/$name.log"
    graph_takes+=("$(csv_figure "$work/$name.csv" graph_extra)")
    twin_takes+=("$(csv_figure "$work/$name.csv" twin_extra)")
    pairs_now=$(csv_figure "$work/$name.csv" twin_pairs)
    pairs+=($pairs_now)
    same_length "$name" "$work/$name.csv" "$twin_spin"
    row "INFO $name: median extra pass, graph launch ${graph_takes[-1]} ms, stream kernel ${twin_takes[-1]} ms; each graph launch's over the stream kernel's after it: $pairs_now"
    python3 "$src/restore_split.py" "$work/$name.csv" "$work/$name.log" "$twin_passes" \
      >"$work/$name.split.txt" 2>&1
    verdict "$name: restore_split.py paired the log's restores with the report's rows" test $? = 0
    sed "s/^/INFO $name: /" "$work/$name.split.txt" | tee -a "$summary"
  done
  row "INFO $label: over ${#graph_takes[@]} runs, the median of the runs' median extra passes: graph launch $(median_of "${graph_takes[@]}") ms, stream kernel $(median_of "${twin_takes[@]}") ms"
  pair_median=$(median_of "${pairs[@]}")
  what="$label: over ${#graph_takes[@]} runs, ${#pairs[@]} graph launches, each one's extra pass over"
  what+=" the stream kernel's right after it: median ${pair_median:-none} (quartiles $(quartiles_of "${pairs[@]}"))"
  verdict "$what, at most 1.02" at_most_2pc_over "$pair_median" 1
}

# median_of X...: the median of the numbers given.
median_of() {
  python3 -c 'import statistics, sys; print(statistics.median(map(float, sys.argv[1:])))' "$@" 2>/dev/null
}

# quartiles_of X...: the first and third quartiles of the numbers given ("none" for fewer than two).
quartiles_of() {
  python3 -c 'import statistics, sys; q = statistics.quantiles(map(float, sys.argv[1:]), n=4); print(f"{q[0]:.3f}, {q[2]:.3f}")' \
    "$@" 2>/dev/null || echo none
}

# at_most_2pc_over A B: A <= 1.02 B (a cost against another, with 2 % for the measurement); false when either is
# not a number.
at_most_2pc_over() {
  python3 -c 'import sys; sys.exit(not float(sys.argv[1]) <= 1.02 * float(sys.argv[2]))' "$1" "$2" 2>/dev/null
}

# graph_program NAME CMD...: the plain run, then for each mode of KREPLAY_GRAPH_MODES: host tier + --verify,
# device tier, the control; every graph launch replayed.
graph_program() {
  local name=$1
  shift
  local plain mode
  plain=$(run "$work/$name.plain.log" "$@")
  verdict "$name: the plain run gives a checksum (${plain:-none})" test -n "$plain"
  for mode in ${KREPLAY_GRAPH_MODES:-node}; do
    graph_program_mode "$name.$mode" "$mode" "$plain" "$@"
  done
}

graph_program_mode() {
  local name=$1 mode=$2 plain=$3
  shift 3
  local sum tier csv graphs replayed control
  # KREPLAY_GRAPH_TWIN_MB: graph mode's programs also rewrite that many MB with one stream kernel (torch_prog.py),
  # or the runs of KREPLAY_GRAPH_TWIN_RUNS where it is set, the kernel lasting longer by KREPLAY_GRAPH_TWIN_SPIN.
  local twin_mb=0 twin_runs= twin_spin=0
  [[ $mode == graph ]] && twin_mb=${KREPLAY_GRAPH_TWIN_MB:-0} twin_runs=${KREPLAY_GRAPH_TWIN_RUNS:-} \
    twin_spin=${KREPLAY_GRAPH_TWIN_SPIN:-0}
  # For every run of this mode, the control's too.
  local -x KREPLAY_PROG_TWIN_MB=$twin_mb KREPLAY_PROG_TWIN_RUNS=$twin_runs KREPLAY_PROG_TWIN_SPIN=$twin_spin
  for tier in ${KREPLAY_GRAPH_TIERS:-host device}; do
    # The host tier with --verify at 3 passes; the device tier at KREPLAY_GRAPH_DEVICE_PASSES (3).
    local verify=() passes=3
    [[ $tier == host ]] && verify=(--verify)
    [[ $tier == device ]] && passes=${KREPLAY_GRAPH_DEVICE_PASSES:-3}
    csv=$work/$name.$tier.csv
    sum=$(run "$work/$name.$tier.log" "$launcher" --graph-profiling "$mode" --passes "$passes" \
          --tier "$tier" "${verify[@]}" --progress 10 -o "$csv" -- "$@")
    verdict "$name, $tier tier, $passes passes: checksum ${sum:-none} == $plain" test -n "$sum" -a "$sum" = "$plain"
    graphs=$(csv_figure "$csv" graphs)
    replayed=$(csv_figure "$csv" graphs_replayed)
    verdict "$name, $tier tier: $replayed of $graphs graph launches replayed (run once: $(csv_figure "$csv" graph_reasons))" \
      test "$graphs" -gt 0 -a "$replayed" = "$graphs"
    verdict "$name, $tier tier: every kernel-node row replayed ($(csv_figure "$csv" nodes_replayed) of $(csv_figure "$csv" nodes))" \
      test "$(csv_figure "$csv" nodes_replayed)" = "$(csv_figure "$csv" nodes)"
    row "INFO $name, $tier tier: graph launches: $(csv_figure "$csv" graph_modes)"
    row "INFO $name, $tier tier: kernel-node rows $(csv_figure "$csv" nodes), replayed $(csv_figure "$csv" nodes_replayed); median extra pass ms: kernel node $(csv_figure "$csv" node_extra), stream launch $(csv_figure "$csv" stream_extra), whole graph $(csv_figure "$csv" graph_extra) (graph's own time $(csv_figure "$csv" graph_kernel_ms))"
    if [[ $twin_mb != 0 ]]; then
      local pairs pair_median
      pairs=$(csv_figure "$csv" twin_pairs)
      same_length "$name, $tier tier" "$csv" "$twin_spin"
      pair_median=$(median_of $pairs)
      row "INFO $name, $tier tier: a graph launch / the stream kernel (runs of MiB: ${twin_runs:-$twin_mb in one}): bytes moved (snapshot and restores) $(csv_figure "$csv" graph_moved) / $(csv_figure "$csv" twin_moved) MB, footprint $(csv_figure "$csv" graph_footprint) / $(csv_figure "$csv" twin_footprint) MB; median extra pass $(csv_figure "$csv" graph_extra) / $(csv_figure "$csv" twin_extra) ms; each graph launch's over the stream kernel's right after it: $pairs"
      verdict "$name, $tier tier, $passes passes: the whole graph's extra pass at most that of the stream kernel right after it (median of the pairs ${pair_median:-none}, 2 % allowed), own kernel times left out" \
        at_most_2pc_over "$pair_median" 1
    fi
    [[ $mode == node ]] && row "INFO $name, $tier tier, the same kernels: $(csv_figure "$csv" node_ratio)"
    [[ $mode == node ]] && row "INFO $name, $tier tier, a kernel node's extra pass over a stream launch's at the same footprint: $(csv_figure "$csv" node_same_footprint)"
    row "INFO $name, $tier tier: $(csv_figure "$csv" replayed) of $(csv_figure "$csv" rows) rows replayed; not: $(csv_figure "$csv" reasons)"
    row "INFO $name, $tier tier: $(grep -h 'kreplay-cuda-replay: [0-9]* launches' "$work/$name.$tier.log" | tail -1)"
  done
  [[ -f $work/$name.host.csv ]] && row "INFO $name --verify: launches whose passes differed: $(csv_figure "$work/$name.host.csv" differs)"
  # The control relaunches the first graph launch's work alone, without restores: in graph mode the launch, in
  # node mode its kernel nodes, only those whose name holds KREPLAY_CONTROL_KERNEL where it is set (some kernel
  # nodes spin for ever when relaunched without restores, the memset node before them not run again; a whole graph
  # runs its memsets), or, without a filter, a graph launch node mode replayed whole when that comes first. A
  # kernel filter makes --launch-skip and --launch-count count only the launches it matches, so both come from the
  # first tier's report in those units (csv_figure.py graph_work), and the control's own report shows what it
  # relaunched: the graph's work and no stream launch.
  local control_kernel=${KREPLAY_CONTROL_KERNEL:-} skip count expected relaunched
  local tiers=(${KREPLAY_GRAPH_TIERS:-host device})
  [[ $mode == graph ]] && control_kernel=""  # a graph row names only its first kernels: no filter to match it by
  read -r skip count expected < <(csv_figure "$work/$name.${tiers[0]}.csv" "graph_work:$mode" "$control_kernel")
  if [[ ${count:-0} == 0 ]]; then
    # --launch-count 0 would mean no limit: every launch after the skip relaunched without restores.
    verdict "$name: a control can be chosen from the ${tiers[0]} tier's report ($work/$name.${tiers[0]}.csv)" false
    return
  fi
  local control_args=(--launch-skip "$skip" --launch-count "$count")
  [[ -n $control_kernel ]] && control_args+=(--kernel-name "$control_kernel")
  control=$(run_timeout=180 run "$work/$name.control.log" "$launcher" --graph-profiling "$mode" --passes 3 \
            --debug-no-restore --progress 10 "${control_args[@]}" -o "$work/$name.control.csv" -- "$@")
  verdict "$name: control, relaunched without restore: checksum ${control:-none} != $plain" \
    test -n "$control" -a "$control" != "$plain"
  relaunched=$(csv_figure "$work/$name.control.csv" replayed_kinds)
  verdict "$name: the control relaunched the graphs' work (${control_args[*]}): $relaunched, expected $expected" \
    test "$relaunched" = "$expected"
  [[ -n $control ]] || row "INFO $name control's log ends: $(tail -4 "$work/$name.control.log" | cut -c1-300 | tr '\n' '|')"
}

if [[ ${KREPLAY_RUN_LIST:-1} != 0 ]]; then
  "$launcher" --list-metrics >"$work/list_metrics.txt" 2>&1
  rc=$?
  if [[ $rc != 0 ]]; then
    # shellcheck disable=SC2046
    cupti=$(find /usr/local/cuda*/ $(python3 -c 'import site; print(" ".join(site.getsitepackages()))') \
              -name 'libcupti.so.13*' 2>/dev/null | head -1)
    KREPLAY_CUPTI_PATH=$cupti "$launcher" --list-metrics >"$work/list_metrics.txt" 2>&1
    rc=$?
  fi
  row "INFO --list-metrics: $(head -4 "$work/list_metrics.txt" | cut -c1-200 | tr '\n' '|')"
  verdict "--list-metrics: exit $rc, $(grep -c '^counter ' "$work/list_metrics.txt") counters, $(grep -c '^ratio ' "$work/list_metrics.txt") ratios, $(grep -c '^throughput ' "$work/list_metrics.txt") throughputs, smsp__inst_executed among them" \
    grep -q '^counter  *smsp__inst_executed ' "$work/list_metrics.txt"
fi

if [[ ${KREPLAY_RUN_PROBE:-1} != 0 ]]; then
  # CUPTI's Range Profiler call by call (kernel-mode launches, a launch without SetConfig, user ranges after
  # automatic ones and on a fresh profiler object): bench/range_profiler_probe.cu.
  # Built here with nvcc against the toolkit's CUPTI (the replay build is a project of its own).
  # Header and library from one CUPTI (the include folder's parent holds the library too, under lib64 or lib).
  cupti_h=$(find /usr/local/cuda*/ -name cupti_range_profiler.h 2>/dev/null | head -1)
  cupti_so=
  [[ -n $cupti_h ]] && cupti_so=$(find "$(dirname "$(dirname "$cupti_h")")" -name 'libcupti.so*' 2>/dev/null | head -1)
  probe=$work/range_profiler_probe
  if [[ -n $cupti_h && -n $cupti_so ]] &&
     nvcc -std=c++17 -O2 -arch=native -I"$src/.." -I"$src/../../../../include" -I"$(dirname "$cupti_h")" \
       "$src/../../bench/range_profiler_probe.cu" -L"$(dirname "$cupti_so")" -l:"$(basename "$cupti_so")" \
       -Xlinker -rpath="$(dirname "$cupti_so")" -o "$probe" >>"$work/env.log" 2>&1; then
    run "$work/range_profiler_probe.log" "$probe" >/dev/null
    sed 's/^/INFO range profiler probe: /' "$work/range_profiler_probe.log" | cut -c1-1500 | tee -a "$summary"
    # KREPLAY_PROBE_LISTS: more metric lists (space-separated, each comma-separated) to time the passes of.
    probe_list=0
    # shellcheck disable=SC2086  # the lists are words
    for list in ${KREPLAY_PROBE_LISTS:-}; do
      probe_list=$((probe_list + 1))
      run "$work/range_profiler_probe.$probe_list.log" "$probe" "$list" >/dev/null
      grep '^chip\|^kernel\|^set-up' "$work/range_profiler_probe.$probe_list.log" |
        sed "s/^/INFO range profiler probe, list $probe_list: /" | cut -c1-1500 | tee -a "$summary"
    done
  else
    row "INFO range profiler probe: not built (CUPTI: ${cupti_h:-no header}, ${cupti_so:-no library}; env.log)"
  fi
fi

if [[ ${KREPLAY_RUN_NATIVE:-1} != 0 ]]; then
  KREPLAY_GRAPH_MODES="node graph" graph_program graphs_step "$graphs_program" step
  KREPLAY_GRAPH_MODES="node graph" graph_program graphs_while "$graphs_program" while
fi

# The graph-mode cost bar (issue 29): a graph's extra pass at most its own time plus a stream launch's extra pass
# at the same footprint. extra_pass_ms leaves each launch's own kernel time out, so the bar reads: the graph's
# extra_pass_ms at most the stream launch's, within 2 % for the measurement (run 14 of 2026-12-03-h200-e: equal
# to 0.12 %). The control relaunches without restores.
if [[ ${KREPLAY_RUN_GRAPH_COST:-1} != 0 ]]; then
  plain=$(run "$work/graph_cost.plain.log" "$graphs_program" cost)
  verdict "graph_cost: the plain run gives a checksum (${plain:-none})" test -n "$plain"
  for tier in ${KREPLAY_GRAPH_TIERS:-host device}; do
    csv=$work/graph_cost.$tier.csv
    sum=$(run "$work/graph_cost.$tier.log" "$launcher" --graph-profiling graph --passes 5 --tier "$tier" \
          -o "$csv" -- "$graphs_program" cost)
    verdict "graph_cost, $tier tier, 5 passes: checksum ${sum:-none} == $plain" test -n "$sum" -a "$sum" = "$plain"
    verdict "graph_cost, $tier tier: $(csv_figure "$csv" graphs_replayed) of $(csv_figure "$csv" graphs) graph launches replayed" \
      test "$(csv_figure "$csv" graphs)" = 4 -a "$(csv_figure "$csv" graphs_replayed)" = 4
    graph_extra=$(csv_figure "$csv" graph_extra)
    stream_extra=$(csv_figure "$csv" stream_extra)
    row "INFO graph_cost, $tier tier: $(csv_figure "$csv" graphs_replayed) of $(csv_figure "$csv" graphs) graph launches and $(csv_figure "$csv" replayed) of $(csv_figure "$csv" rows) rows replayed, footprint $(csv_figure "$csv" max_footprint) bytes; median extra pass ms: whole graph $graph_extra (its own time $(csv_figure "$csv" graph_kernel_ms)), stream launch $stream_extra"
    verdict "graph_cost, $tier tier: a graph's extra pass ($graph_extra ms) at most a stream launch's of the same footprint and written bytes ($stream_extra ms, 2 % allowed), own kernel times left out" \
      at_most_2pc_over "$graph_extra" "$stream_extra"
  done
  control=$(run "$work/graph_cost.control.log" "$launcher" --graph-profiling graph --passes 3 --debug-no-restore \
            -o "$work/graph_cost.control.csv" -- "$graphs_program" cost)
  verdict "graph_cost: control, relaunched without restore: checksum ${control:-none} != $plain" \
    test -n "$control" -a "$control" != "$plain"
fi

counts="smsp__inst_executed.sum,sm__warps_launched.sum,smsp__sass_inst_executed_op_global_ld.sum,l1tex__t_bytes.sum"
more="$counts,smsp__sass_inst_executed_op_global_st.sum,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"
more="$more,sm__inst_executed_pipe_tensor.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum"
more="$more,lts__t_sectors_srcunit_tex_op_read.sum,sm__cycles_elapsed.avg,gpu__time_duration.sum"
more="$more,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed"
# The side section's list: the 15 above, or with KREPLAY_SIDE_SET=warps the launcher's --set warps (its names, so
# that ncu counts the same).
side_metrics=$more
if [[ ${KREPLAY_SIDE_SET:-} == warps ]]; then
  side_metrics=$(sed -n '/^constexpr const char\* \(counts_set\|warps_extra\)\[\]/,/^};/p' \
                   "$src/../../../../adapters/cuda/src/inject/replay_config.cpp" | grep -o '"[a-z0-9_.]*"' | tr -d '"' |
                   paste -sd, -)
  verdict "KREPLAY_SIDE_SET=warps: the launcher's list read from replay_config.cpp ($(tr ',' '\n' <<<"$side_metrics" | grep -c .) names)" \
    test "$(tr ',' '\n' <<<"$side_metrics" | grep -c .)" = 33
fi

# The seconds a run's training steps took, from the program's STEP_MS lines in LOG (the process less its start-up
# and the checksum; the issue's time bars are for the step).
steps_s() {
  awk '/^STEP_MS /{ms += $3} END {printf "%.1f", ms / 1000}' "$1"
}

# counted_by_kreplay NAME METRICS PLAIN -- CMD...: kreplay's kernel mode with --metrics, its checksum, time and
# phases. counted_by_ncu NAME METRICS NCU_ARGS -- CMD...: Nsight Compute on the same program with the same metrics,
# its time, and its agreement with kreplay's report when there is one (counters_compare.py).
# counted_against_ncu NAME METRICS NCU_ARGS PLAIN -- CMD...: both.
counted_by_kreplay() {
  local name=$1 metrics=$2 plain=$3
  shift 4
  local sum start=$SECONDS
  # With the phase log (KREPLAY_INJECT_LOG=info): one line a launch, into the log file, which phases.py sums.
  sum=$(KREPLAY_INJECT_LOG=info run "$work/$name.kreplay.log" "$launcher" --metrics "$metrics" --progress 10 \
        -o "$work/$name.kreplay.csv" -- "$@")
  row "INFO $name: kreplay, $(tr ',' '\n' <<<"$metrics" | wc -l) metrics: $((SECONDS - start)) s (steps $(steps_s "$work/$name.kreplay.log") s); $(grep -h 'kreplay-cuda-replay: [0-9]* launches' "$work/$name.kreplay.log" | tail -1)"
  row "INFO $name: kreplay: $(csv_figure "$work/$name.kreplay.csv" pass_share); replaying $(csv_figure "$work/$name.kreplay.csv" replay_s) s"
  verdict "$name: kreplay with counters: checksum ${sum:-none} == $plain" test -n "$sum" -a "$sum" = "$plain"
  python3 "$src/phases.py" "$work/$name.kreplay.log" | sed "s/^/INFO $name: kreplay by phase: /" | tee -a "$summary"
}

counted_by_ncu() {
  local name=$1 metrics=$2 ncu_args=$3
  shift 4
  local start=$SECONDS
  # shellcheck disable=SC2086
  timeout -k 10 "$timeout_s" ncu --metrics "$metrics" $ncu_args --cache-control all --clock-control none --csv \
    --page raw --log-file "$work/$name.ncu.csv" "$@" >"$work/$name.ncu.log" 2>&1
  row "INFO $name: ncu $ncu_args: exit $?, $((SECONDS - start)) s (steps $(steps_s "$work/$name.ncu.log") s)"
  [[ -f $work/$name.kreplay.csv ]] || return 0
  python3 "$src/counters_compare.py" "$work/$name.kreplay.csv" "$work/$name.ncu.csv" >"$work/$name.compare.txt" 2>&1
  local compare_rc=$?
  tee -a "$summary" <"$work/$name.compare.txt"
  verdict "$name: kreplay and ncu agree (counters_compare.py)" test "$compare_rc" = 0
}

counted_against_ncu() {
  local name=$1 metrics=$2 ncu_args=$3 plain=$4
  shift 5
  counted_by_kreplay "$name" "$metrics" "$plain" -- "$@"
  [[ ${KREPLAY_NCU:-1} == 0 ]] || counted_by_ncu "$name" "$metrics" "$ncu_args" -- "$@"
}

# side_range KIND PLAIN CMD...: range mode on the side section's program, KREPLAY_RANGE_SIZE (default 32) launches
# per profiler pass, each launch a profiler range of KIND (--profiler-ranges user|auto); its checksum, time, what
# was not counted and why, and its count metrics against kernel mode's.
side_range() {
  local kind=$1 plain=$2 sum start=$SECONDS
  shift 2
  local name=side.range
  [[ $kind == auto ]] || name=side.range_$kind
  sum=$(run "$work/$name.log" "$launcher" --replay-mode range --range-size "${KREPLAY_RANGE_SIZE:-32}" \
        --profiler-ranges "$kind" --metrics "$side_metrics" --progress 10 -o "$work/$name.csv" -- "$@")
  row "INFO side: kreplay --replay-mode range --range-size ${KREPLAY_RANGE_SIZE:-32} --profiler-ranges $kind: $((SECONDS - start)) s (steps $(steps_s "$work/$name.log") s); $(grep -h 'kreplay-cuda-replay: [0-9]* launches' "$work/$name.log" | tail -1)"
  row "INFO side: range mode, $kind ranges: $(csv_figure "$work/$name.csv" pass_share); replaying $(csv_figure "$work/$name.csv" replay_s) s"
  row "INFO side: range mode, $kind ranges, not counted: $(csv_figure "$work/$name.csv" uncounted | cut -c1-900)"
  row "INFO side: range mode, $kind ranges: $(grep -h 'kreplay-cuda-replay:   ranges: ' "$work/$name.log" | tail -1 | cut -c1-600)"
  verdict "side: range mode, $kind ranges: checksum ${sum:-none} == $plain" test -n "$sum" -a "$sum" = "$plain"
  [[ -f $work/side.kreplay.csv ]] || return 0  # KREPLAY_SIDE_KERNEL=0: nothing to compare with
  python3 "$src/counters_compare.py" "$work/$name.csv" "$work/side.kreplay.csv" >"$work/$name.compare.txt" 2>&1
  local compare_rc=$?
  sed "s/^/range mode ($kind ranges) against kernel mode: /" "$work/$name.compare.txt" | tee -a "$summary"
  verdict "side: range mode's count metrics ($kind ranges) equal kernel mode's (counters_compare.py)" test "$compare_rc" = 0
}

if [[ ${KREPLAY_RUN_CUDAGRAPH:-1} != 0 ]]; then
  # Two eager steps after the graph's: the same kernels as stream launches over the same memory (the cost
  # comparison). Node mode's control relaunches the first graph's elementwise kernel nodes only: relaunched without
  # restores, cuDNN's indexed wgrad kernel node spins for ever (run 4 of 2026-12-03-b; the memset node before it in
  # the graph is not run again between passes); the elementwise and optimizer kernels change the result.
  # (--exclude would not do: node mode runs a graph that holds an excluded kernel once.)
  # In graph mode, after each graph step, a stream kernel whose restores copy the runs a graph launch's copy
  # (KREPLAY_CUDAGRAPH_TWIN_RUNS, default $graph_runs; empty: KREPLAY_CUDAGRAPH_TWIN_MB, default 87, in one run) and
  # which runs about as long as a graph launch (KREPLAY_CUDAGRAPH_TWIN_SPIN, default 700 multiply-adds per element;
  # 0: an elementwise kernel of 0.08 ms), for graph mode's cost against a stream launch in one process: the same
  # footprint, the same copies, the same length (docs/results/2026-12-04-h200-c.md has the figures of each twin).
  # The device tier runs KREPLAY_CUDAGRAPH_COST_PASSES (default 9) passes in both modes, so that most of its
  # restores are the partial ones an extra pass adds (the twin split below says why).
  KREPLAY_PROG_STEPS=4 KREPLAY_PROG_EAGER_STEPS=2 KREPLAY_GRAPH_MODES=${KREPLAY_CUDAGRAPH_MODES:-node graph} \
    KREPLAY_GRAPH_DEVICE_PASSES=${KREPLAY_CUDAGRAPH_COST_PASSES:-9} \
    KREPLAY_GRAPH_TWIN_MB=${KREPLAY_CUDAGRAPH_TWIN_MB:-87} KREPLAY_GRAPH_TWIN_RUNS=${KREPLAY_CUDAGRAPH_TWIN_RUNS-$graph_runs} \
    KREPLAY_GRAPH_TWIN_SPIN=${KREPLAY_CUDAGRAPH_TWIN_SPIN:-700} \
    KREPLAY_CONTROL_KERNEL=elementwise graph_program cudagraph \
    python3 "$src/torch_prog.py" cudagraph
fi
if [[ ${KREPLAY_RUN_TWIN_SPLIT:-0} != 0 ]]; then
  # Graph mode's restores against a stream kernel's, on each tier of KREPLAY_TWIN_TIERS (default "device"),
  # KREPLAY_TWIN_TAKES (default 3) runs of KREPLAY_TWIN_STEPS graph steps (default 12) at KREPLAY_TWIN_PASSES
  # passes (default 9), for each copy method of KREPLAY_TWIN_COPY_METHODS (default "automatic";
  # KREPLAY_INJECT_COPY_METHOD), stream kernel layout of KREPLAY_TWIN_LAYOUTS (default "graph": the runs the graph's
  # restores copy, $graph_runs; "one": 87 MB in one run; or a comma list of MiB) and length of KREPLAY_TWIN_SPINS
  # (default 700 multiply-adds per element: about as long as a graph launch; 0: an elementwise kernel). Each run's
  # median extra passes, its restores split into device ops and the engine's host work and by copy sizes
  # (restore_split.py), and over the runs of each the median of each graph launch's extra pass over the stream
  # kernel's right after it: whole-run medians compared badly (one run's moved by up to 15 % from run to run, and
  # within a run the first launches cost up to 40 % more than the last, 2026-12-04 (b)), while a pair runs within a
  # millisecond. Why 9 passes: with a learned write set the first and the last restore of a window digest the whole
  # footprint and the others only the write set, so an extra pass adds one of those partial restores; at 3 passes
  # both restores are the full ones, which every window pays once whatever its passes (2026-12-04 (d)).
  twin_steps=${KREPLAY_TWIN_STEPS:-12} twin_passes=${KREPLAY_TWIN_PASSES:-9}
  plain=$(run "$work/twin_split.plain.log" env KREPLAY_PROG_STEPS="$twin_steps" KREPLAY_PROG_EAGER_STEPS=2 \
          python3 "$src/torch_prog.py" cudagraph)
  for tier in ${KREPLAY_TWIN_TIERS:-device}; do
    for method in ${KREPLAY_TWIN_COPY_METHODS:-automatic}; do
      for layout in ${KREPLAY_TWIN_LAYOUTS:-graph}; do
        for twin_spin in ${KREPLAY_TWIN_SPINS:-700}; do
          twin_split_case "$tier" "$method" "$layout" "$twin_spin"
        done
      done
    done
  done
fi
if [[ ${KREPLAY_RUN_CUDAGRAPH:-1} != 0 && ${KREPLAY_CUDAGRAPH_COUNTED:-1} != 0 ]]; then
  # The kernel nodes counted (node mode) against Nsight Compute's node mode, on the same loop.
  KREPLAY_PROG_STEPS=4 KREPLAY_PROG_EAGER_STEPS=2 counted_against_ncu cudagraph_counted "$counts" "--replay-mode kernel --graph-profiling node" \
    "$(sed -n 's/^CHECKSUM //p' "$work/cudagraph.plain.log" | tail -1)" -- python3 "$src/torch_prog.py" cudagraph
  row "INFO cudagraph_counted: kernel-node rows $(csv_figure "$work/cudagraph_counted.kreplay.csv" nodes), replayed $(csv_figure "$work/cudagraph_counted.kreplay.csv" nodes_replayed)"
fi

if [[ ${KREPLAY_RUN_SIDE:-1} != 0 ]]; then
  # ResNet-18, KREPLAY_SIDE_STEPS (default 1) steps, every launch, 15 metrics (10 passes on GH100; with
  # KREPLAY_SIDE_SET=warps --set warps' 33, 9 passes): the plain run,
  # kreplay, CUPTI's own kernel replay and Nsight Compute, each timed whole; values compared in pairs.
  export KREPLAY_PROG_STEPS=${KREPLAY_SIDE_STEPS:-1}
  cmd=(python3 "$src/torch_prog.py" resnet)
  start=$SECONDS
  plain=$(run "$work/side.plain.log" "${cmd[@]}")
  row "INFO side: plain run, $KREPLAY_PROG_STEPS steps: $((SECONDS - start)) s (steps $(steps_s "$work/side.plain.log") s)"
  [[ ${KREPLAY_SIDE_KERNEL:-1} == 0 ]] || counted_by_kreplay side "$side_metrics" "$plain" -- "${cmd[@]}"
  [[ ${KREPLAY_NCU:-1} == 0 ]] || counted_by_ncu side "$side_metrics" "--replay-mode kernel" -- "${cmd[@]}"
  if [[ ${KREPLAY_SIDE_CUPTI:-1} != 0 ]]; then
    start=$SECONDS
    sum=$(run "$work/side.cupti.log" "$launcher" --backend cupti-kernel-replay --metrics "$side_metrics" --progress 10 \
          -o "$work/side.cupti.csv" -- "${cmd[@]}")
    row "INFO side: CUPTI's kernel replay (--backend cupti-kernel-replay): $((SECONDS - start)) s (steps $(steps_s "$work/side.cupti.log") s); $(grep -h 'kreplay-cuda-replay: [0-9]* launches' "$work/side.cupti.log" | tail -1); replaying $(csv_figure "$work/side.cupti.csv" replay_s) s"
    verdict "side: CUPTI's kernel replay: checksum ${sum:-none} == $plain" test -n "$sum" -a "$sum" = "$plain"
  fi
  if [[ ${KREPLAY_SIDE_CUPTI:-1} != 0 && -f $work/side.kreplay.csv ]]; then
    python3 "$src/counters_compare.py" "$work/side.kreplay.csv" "$work/side.cupti.csv" 2>&1 |
      sed 's/^/against CUPTI kernel replay: /' | tee -a "$summary"
    # Where Nsight Compute and CUPTI's kernel replay agree with each other, kreplay's agreement with them.
    python3 "$src/counters_compare.py" "$work/side.kreplay.csv" "$work/side.ncu.csv" "$work/side.cupti.csv" 2>&1 |
      grep '^NOISE' | tee -a "$summary"
  fi
  # Range mode: the same launches and metrics, with each kind of profiler range in KREPLAY_RANGE_KINDS.
  if [[ ${KREPLAY_SIDE_RANGE:-1} != 0 ]]; then
    for kind in ${KREPLAY_RANGE_KINDS:-auto}; do
      side_range "$kind" "$plain" "${cmd[@]}"
    done
  fi
  unset KREPLAY_PROG_STEPS
fi

if [[ ${KREPLAY_RUN_COMPILED:-1} != 0 ]]; then
  # One compile worker: no pool of processes under the injection. The plain run fills Inductor's caches (code
  # and autotuning choices), so the replayed runs compile the same kernels.
  # The control relaunches Inductor's Triton kernels only: relaunching every kernel node without restores ran past
  # 180 s on the H200 (2026-12-03-c), like the cudagraph loop's cuDNN wgrad node; the Triton kernels that update in
  # place (batch norm's running statistics among them) change the result.
  # Two steps after the graphs' run the model compiled without CUDA graphs: the same Triton kernels as stream
  # launches over the same memory (the node-over-stream cost figure).
  KREPLAY_PROG_STEPS=6 KREPLAY_PROG_EAGER_STEPS=2 TORCHINDUCTOR_COMPILE_THREADS=1 KREPLAY_GRAPH_MODES=${KREPLAY_COMPILED_MODES:-${KREPLAY_GRAPH_MODES:-node}} \
    KREPLAY_CONTROL_KERNEL=triton graph_program compiled python3 "$src/torch_prog.py" compiled
fi

if [[ ${KREPLAY_RUN_XLA:-1} != 0 ]]; then
  # Command buffers at XLA's default (on); autotuning off so that every run computes with the same algorithms;
  # preallocation off so that the snapshots fit the host budget.
  # With KREPLAY_XLA_TRACE=1, first the tracker's trace of every virtual-memory call (xla.trace.log), beside why
  # graph launches ran once (how the untracked parameter of 2026-12-03-c was found). The XLA settings are given to
  # each command, not exported.
  xla_flags="--xla_gpu_autotune_level=0"
  if [[ ${KREPLAY_XLA_TRACE:-0} != 0 ]]; then
    XLA_FLAGS=$xla_flags XLA_PYTHON_CLIENT_PREALLOCATE=false KREPLAY_INJECT_LOG=trace \
      KREPLAY_PROG_STEPS=2 run "$work/xla.trace.log" "$launcher" --passes 3 -o "$work/xla.trace.csv" -- \
      python3 "$src/jax_prealloc.py" >/dev/null
    row "INFO xla trace: $(grep -c 'vmem\|cuMem' "$work/xla.trace.log") virtual-memory lines; graph launches run once: $(csv_figure "$work/xla.trace.csv" graph_reasons | cut -c1-400)"
  fi
  XLA_FLAGS=$xla_flags XLA_PYTHON_CLIENT_PREALLOCATE=false KREPLAY_PROG_STEPS=5 \
    KREPLAY_GRAPH_MODES=${KREPLAY_XLA_MODES:-${KREPLAY_GRAPH_MODES:-node}} graph_program xla python3 "$src/jax_prealloc.py"
fi

if [[ ${KREPLAY_RUN_COUNTERS:-1} != 0 ]]; then
  launches=${KREPLAY_COUNTER_LAUNCHES:-60}
  export KREPLAY_PROG_STEPS=1
  cmd=(python3 "$src/torch_prog.py" resnet)
  plain=$(resnet_plain)
  for list in "kreplay:$counts" "more:$more"; do
    name=${list%%:*}
    metrics=${list#*:}
    start=$SECONDS
    sum=$(run "$work/counters.$name.log" "$launcher" --metrics "$metrics" --launch-count "$launches" --progress 10 \
          -o "$work/counters.$name.csv" -- "${cmd[@]}")
    what="kreplay, $(tr ',' '\n' <<<"$metrics" | wc -l) metrics, $launches launches"
    row "INFO counters: $what: $((SECONDS - start)) s; $(grep -h 'kreplay-cuda-replay: [0-9]* launches' "$work/counters.$name.log" | tail -1)"
    verdict "counters: $what: checksum ${sum:-none} == $plain" test -n "$sum" -a "$sum" = "$plain"
  done
  start=$SECONDS
  timeout -k 10 "$timeout_s" ncu --metrics "$more" --replay-mode kernel --cache-control all --clock-control none \
    --launch-count "$launches" --csv --page raw --log-file "$work/counters.ncu.csv" "${cmd[@]}" \
    >"$work/counters.ncu.log" 2>&1
  row "INFO counters: ncu, 15 metrics, $launches launches: exit $?, $((SECONDS - start)) s"
  for list in kreplay more; do
    python3 "$src/counters_compare.py" "$work/counters.$list.csv" "$work/counters.ncu.csv" >"$work/counters.$list.compare.txt" 2>&1
    compare_rc=$?
    tee -a "$summary" <"$work/counters.$list.compare.txt"
    verdict "counters: kreplay ($list list) and ncu agree (counters_compare.py)" test "$compare_rc" = 0
  done
  unset KREPLAY_PROG_STEPS
fi

if [[ ${KREPLAY_RUN_SET:-1} != 0 ]]; then
  # What a user sees with --set full (ResNet-18, 1 step, the first KREPLAY_SET_LAUNCHES launches, default 200):
  # the launcher's summary on stderr, and the CSV read back with pandas.
  export KREPLAY_PROG_STEPS=1
  cmd=(python3 "$src/torch_prog.py" resnet)
  plain=$(resnet_plain)
  start=$SECONDS
  sum=$(run "$work/set.log" "$launcher" --set full --launch-count "${KREPLAY_SET_LAUNCHES:-200}" -o "$work/set.csv" \
        -- "${cmd[@]}")
  row "INFO --set full: $((SECONDS - start)) s"
  grep -h "^kreplay-cuda-replay" "$work/set.log" | tee -a "$summary"
  verdict "--set full: checksum ${sum:-none} == $plain" test -n "$sum" -a "$sum" = "$plain"
  python3 - "$work/set.csv" <<'PY' 2>&1 | tee -a "$summary"
import sys
import pandas as pd
df = pd.read_csv(sys.argv[1])
counted = df[df["counters"].isna() & (df["replayed"] == 1)]
print(f"pandas: {len(df)} rows, {len(counted)} counted, {len(df.columns)} columns, passes {counted['passes_run'].median()}")
columns = ["gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed", "smsp__inst_executed.sum"]
print(counted[columns].describe().to_string())
PY
  unset KREPLAY_PROG_STEPS
fi

kreplay_replay_end
