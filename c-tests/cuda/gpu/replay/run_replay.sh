#!/usr/bin/env bash
# kreplay-cuda-replay on five real programs and a JAX one, built and run in one go on a machine with an NVIDIA
# GPU, from the repository root:
#
#   c-tests/cuda/gpu/replay/run_replay.sh PREBUILT_DIR OUT_DIR
#
# PREBUILT_DIR holds libkreplay.a or libkreplay.a.gz (c-tests/cuda/README.md). Needs nvcc, CMake, Ninja and
# python3 with torch, torchvision, cupy and jax. Programs (fixed seeds, deterministic settings, one checksum each):
#   globals      replay_globals (globals.cu): __device__ globals mutated by its kernels, __constant__ ones
#                rewritten by the host, one JIT module launched through the driver API
#   cupy         cupy_prog.py: elementwise, a reduction, cuBLAS and cuRAND on about 1 GiB, in place
#   resnet       torch_prog.py resnet: ResNet-18, batch 32, 224 x 224, SGD with momentum, 3 steps
#   transformer  torch_prog.py transformer: a 4-layer transformer encoder, AdamW, 3 steps
#   reset        replay_reset (reset.cu): cudaDeviceReset twice mid-run with allocations and modules live, one JIT
#                image loaded twice side by side, one instance unloaded and loaded again, globals mutated
# For each: the plain run's checksum, then every kernel replayed with 3 passes on the host tier with
# dirty-only and --verify, on the device tier, and on the device tier with a budget of half the footprint: each
# checksum must equal the plain run's. The control, relaunch without restore (--debug-no-restore), must differ
# (under a timeout; cuDNN's split-K weight-gradient kernels are left out of it: relaunched without restore they
# hung the GPU). Then the cost (KREPLAY_RUN_PERF=0 skips it): ResNet-18, 2 steps, every kernel at 5 passes,
# kreplay (host tier, dirty-only, the write set learned on the first pass) against CUPTI's Checkpoint API, and
# kreplay at 20 passes, each checksum equal to the plain run's. Then JAX with its default preallocation
# (KREPLAY_RUN_JAX=0 skips it): the program must finish, every declined launch say HOST_BUDGET, and the host's
# available memory never fall below 20 % of its total (sampled every 0.2 s). OUT_DIR receives replay.tar.gz (every log
# and report) and summary.txt. The exit status is 1 when a check failed.
# Then CUDA graphs (KREPLAY_RUN_GRAPHS=0 skips it): torch_prog.py cudagraph, a torch.cuda.graph training loop, 4
# steps, every graph launch replayed whole at 3 passes on the host tier with --verify and on the device tier, each
# checksum equal to the plain run's, and the no-restore control differing.
set -u -o pipefail

src=$(cd "$(dirname "$0")" && pwd)
source "$src/../setup.sh"
kreplay_gpu_args "run_replay.sh PREBUILT_DIR OUT_DIR" "$@"
kreplay_replay_begin replay

{
  kreplay_gpu_describe name,driver_version,memory.total,clocks.sm,clocks.max.sm
  python3 -c 'import torch, torchvision, cupy; print("torch", torch.__version__, "torchvision", torchvision.__version__, "cupy", cupy.__version__)' 2>&1
} >"$work/env.log" 2>&1
kreplay_replay_launcher "kreplay_cuda_inject kreplay_cuda_replay replay_globals replay_reset"

declare -A command=(
  [globals]="$build/replay_globals"
  [cupy]="python3 $src/cupy_prog.py"
  [resnet]="python3 $src/torch_prog.py resnet"
  [transformer]="python3 $src/torch_prog.py transformer"
  [reset]="$build/replay_reset"
)

for program in ${KREPLAY_RUN_PROGRAMS:-globals cupy resnet transformer reset}; do
  cmd=${command[$program]}
  plain=$(run "$work/$program.plain.log" $cmd)
  verdict "$program: the plain run gives a checksum (${plain:-none})" test -n "$plain"
  host=$(run "$work/$program.host.log" "$launcher" --passes 3 --tier host --dirty-only on --verify --progress 10 \
         -o "$work/$program.host.csv" -- $cmd)
  footprint=$(csv_figure "$work/$program.host.csv" max_footprint)
  verdict "$program: host tier + dirty-only + verify, 3 passes: checksum $host == $plain" \
    test -n "$host" -a "$host" = "$plain"
  # An equal checksum proves nothing if nothing was replayed: every launch of these programs must be.
  verdict "$program: host tier: every launch replayed ($(csv_figure "$work/$program.host.csv" replayed) of $(csv_figure "$work/$program.host.csv" rows))" \
    test "$(csv_figure "$work/$program.host.csv" replayed)" -gt 0 -a \
    "$(csv_figure "$work/$program.host.csv" replayed)" = "$(csv_figure "$work/$program.host.csv" rows)"
  row "INFO $program: host: $(csv_figure "$work/$program.host.csv" replayed) of $(csv_figure "$work/$program.host.csv" rows) launches replayed, largest footprint $footprint bytes; $(grep -h 'kreplay-cuda-replay: [0-9]* launches' "$work/$program.host.log" | tail -1)"
  row "INFO $program: --verify: launches whose passes differed, and their kernels: $(csv_figure "$work/$program.host.csv" differs)"
  device=$(run "$work/$program.device.log" "$launcher" --passes 3 --tier device --progress 10 \
           -o "$work/$program.device.csv" -- $cmd)
  verdict "$program: device tier, 3 passes: checksum $device == $plain" test -n "$device" -a "$device" = "$plain"
  verdict "$program: device tier: every launch replayed" test "$(csv_figure "$work/$program.device.csv" replayed)" -gt 0 -a \
    "$(csv_figure "$work/$program.device.csv" replayed)" = "$(csv_figure "$work/$program.device.csv" rows)"
  half=$((footprint / 2))
  if [[ $half -eq 0 ]]; then
    verdict "$program: half the footprint is known (the host run's report has one)" false
    continue
  fi
  halfsum=$(run "$work/$program.half.log" "$launcher" --passes 3 --tier device --device-budget "$half" \
            --progress 10 -o "$work/$program.half.csv" -- $cmd)
  verdict "$program: device tier, budget $half bytes (half the footprint), 3 passes: checksum $halfsum == $plain" \
    test -n "$halfsum" -a "$halfsum" = "$plain"
  verdict "$program: half budget: every launch replayed" test "$(csv_figure "$work/$program.half.csv" replayed)" -gt 0 -a \
    "$(csv_figure "$work/$program.half.csv" replayed)" = "$(csv_figure "$work/$program.half.csv" rows)"
  exclude='nccl|nvshmem|segment_k'
  control=$(run_timeout=120 run "$work/$program.control.log" "$launcher" --passes 3 --tier host \
            --debug-no-restore --exclude "$exclude" --progress 10 -o "$work/$program.control.csv" -- $cmd)
  verdict "$program: control, relaunched without restore: checksum ${control:-none (see log)} != $plain" \
    test -n "$control" -a "$control" != "$plain"
done

if [[ ${KREPLAY_RUN_GRAPHS:-1} != 0 ]]; then
  # A torch.cuda.graph training loop (issue 29): its steps are graph launches, each replayed as one window
  # (--graph-profiling graph, the default); the warm-up's launches are stream launches, the capture's run once.
  export KREPLAY_PROG_STEPS=4
  cmd="python3 $src/torch_prog.py cudagraph"
  plain=$(run "$work/graph.plain.log" $cmd)
  verdict "cudagraph: the plain run gives a checksum (${plain:-none})" test -n "$plain"
  for tier in host device; do
    verify=()
    [[ $tier == host ]] && verify=(--verify)
    sum=$(run "$work/graph.$tier.log" "$launcher" --passes 3 --tier "$tier" "${verify[@]}" --progress 10 \
          -o "$work/graph.$tier.csv" -- $cmd)
    verdict "cudagraph, $tier tier, 3 passes: checksum $sum == $plain" test -n "$sum" -a "$sum" = "$plain"
    graphs=$(csv_figure "$work/graph.$tier.csv" graphs)
    replayed=$(csv_figure "$work/graph.$tier.csv" graphs_replayed)
    verdict "cudagraph, $tier tier: $replayed of $graphs graph launches replayed (run once: $(csv_figure "$work/graph.$tier.csv" graph_reasons))" \
      test "$graphs" -gt 0 -a "$replayed" = "$graphs"
    row "INFO cudagraph, $tier tier: $(grep -h 'kreplay-cuda-replay: [0-9]* launches' "$work/graph.$tier.log" | tail -1)"
  done
  row "INFO cudagraph --verify: launches whose passes differed, and their kernels: $(csv_figure "$work/graph.host.csv" differs)"
  # Only the graph launches relaunched without restore (the launches before the first one skipped): with every
  # launch in it, the control hung in the warm-up (run of 2026-12-02, 120 s timeout) before a graph was launched.
  control=$(run_timeout=120 run "$work/graph.control.log" "$launcher" --passes 3 --debug-no-restore --progress 10 \
            --launch-skip "$(csv_figure "$work/graph.host.csv" first_graph)" -o "$work/graph.control.csv" -- $cmd)
  verdict "cudagraph: control, relaunched without restore: checksum ${control:-none (see log)} != $plain" \
    test -n "$control" -a "$control" != "$plain"
  unset KREPLAY_PROG_STEPS
fi

if [[ ${KREPLAY_RUN_PERF:-1} != 0 ]]; then
  export KREPLAY_PROG_STEPS=2
  cmd=${command[resnet]}
  plain=$(run "$work/perf.plain.log" $cmd)
  for backend in kreplay cupti; do
    sum=$(run "$work/perf.$backend.log" "$launcher" --passes 5 --tier host --dirty-only on --backend "$backend" \
      --progress 10 -o "$work/perf.$backend.csv" -- $cmd)
    verdict "perf: $backend, 5 passes: checksum $sum == $plain" test -n "$sum" -a "$sum" = "$plain"
  done
  sum=$(run "$work/perf.kreplay20.log" "$launcher" --passes 20 --tier host --dirty-only on \
    --progress 10 -o "$work/perf.kreplay20.csv" -- $cmd)
  verdict "perf: kreplay, 20 passes: checksum $sum == $plain" test -n "$sum" -a "$sum" = "$plain"
  unset KREPLAY_PROG_STEPS
  python3 "$src/replay_figures.py" "$work" >"$work/perf.figures.txt" 2>&1
  tee -a "$summary" <"$work/perf.figures.txt"
  grep -q '^FAIL' "$work/perf.figures.txt" && failures=$((failures + 1))
fi

if [[ ${KREPLAY_RUN_JAX:-1} != 0 ]]; then
  # XLA's command buffers off: every kernel is then a stream launch, so every launch meets the budget. Autotuning
  # off: it times candidate kernels and keeps the fastest, so two runs may compute with different algorithms.
  export XLA_FLAGS="--xla_gpu_enable_command_buffer= --xla_gpu_autotune_level=0"
  jax_cmd="python3 $src/jax_prealloc.py"
  plain=$(run "$work/jax.plain.log" $jax_cmd)
  verdict "jax: the plain run gives a checksum (${plain:-none})" test -n "$plain"
  for tier in host device; do
    python3 "$src/memwatch.py" "$work/jax.$tier.mem" &
    watcher=$!
    sum=$(run "$work/jax.$tier.log" "$launcher" --passes 3 --tier "$tier" --progress 10 \
          -o "$work/jax.$tier.csv" -- $jax_cmd)
    kill "$watcher" 2>/dev/null
    wait "$watcher" 2>/dev/null
    verdict "jax, $tier tier: the program finishes (checksum ${sum:-none}; plain $plain)" test -n "$sum"
    row "INFO jax, $tier tier: checksum equal to the plain run's: $([[ $sum == "$plain" ]] && echo yes || echo no)"
    verdict "jax, $tier tier: $(csv_figure "$work/jax.$tier.csv" declined) declined launches, all for the host budget" \
      test "$(csv_figure "$work/jax.$tier.csv" declined_other)" = 0 -a "$(csv_figure "$work/jax.$tier.csv" declined)" -gt 0
    verdict "jax, $tier tier: the host's available memory stayed at or above 20 % ($(cat "$work/jax.$tier.mem.min" 2>/dev/null))" \
      python3 -c "import sys; sys.exit(0 if float(open('$work/jax.$tier.mem.min').read().split()[0]) >= 20 else 1)"
  done
  unset XLA_FLAGS
fi

kreplay_replay_end
