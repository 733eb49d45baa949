#!/usr/bin/env bash
# GPU-free test of kreplay-cuda-replay (adapters/cuda/src/launcher): --help lists every option, malformed
# options are refused before the program starts, and the program runs with the library's environment (the
# injection library found beside the launcher, the options as KREPLAY_REPLAY_*, stale ones removed).
# The installed layout (bin/ and lib/) is checked with copies of both.
#   test_launcher.sh LAUNCHER LIBRARY
set -u
launcher=${1:?usage: test_launcher.sh LAUNCHER LIBRARY}
library_built=${2:?usage: test_launcher.sh LAUNCHER LIBRARY}
failures=0
check() {  # check WHAT CONDITION...
  local what=$1
  shift
  if "$@"; then echo "PASS $what"; else echo "FAIL $what"; failures=$((failures + 1)); fi
}

help=$("$launcher" --help)
check "--help exits 0" test $? -eq 0
for option in --passes --kernel-name --launch-skip --launch-count --tier --dirty-only --write-set --host-budget \
              --device-budget --verify --backend --exclude --progress --debug-no-restore --output; do
  check "--help lists $option" grep -q -- "$option" <<<"$help"
done

out=$("$launcher" --passes 0 -- true 2>&1); rc=$?
check "--passes 0 is refused (rc $rc)" test "$rc" -eq 2
check "the refusal names the option's variable and value" grep -q "KREPLAY_REPLAY_PASSES=0" <<<"$out"
out=$("$launcher" --tier gpu -- true 2>&1); rc=$?
check "--tier gpu is refused (rc $rc): $out" test "$rc" -eq 2
out=$("$launcher" --frobnicate -- true 2>&1); rc=$?
check "an unknown option is refused (rc $rc)" test "$rc" -eq 2
out=$("$launcher" --passes 2>&1); rc=$?
check "an option without its value is refused (rc $rc)" test "$rc" -eq 2
check "the refusal says the value is missing" grep -q -- "--passes needs a value" <<<"$out"
out=$("$launcher" --verify=1 -- true 2>&1); rc=$?
check "a flag given a value is refused (rc $rc)" test "$rc" -eq 2
check "the refusal says the flag takes none" grep -q -- "--verify takes no value" <<<"$out"
out=$("$launcher" --passes= -- true 2>&1); rc=$?
check "an empty value is refused (rc $rc)" test "$rc" -eq 2
out=$("$launcher" -o '' -- true 2>&1); rc=$?
check "an empty report name is refused (rc $rc)" test "$rc" -eq 2
out=$("$launcher" 2>&1); rc=$?
check "no program is refused (rc $rc)" test "$rc" -eq 2
out=$("$launcher" --list-metrics=gpu 2>&1); rc=$?
check "--list-metrics=gpu is refused (rc $rc)" test "$rc" -eq 2
check "the refusal asks for a device number" grep -q "a device number" <<<"$out"
out=$("$launcher" --list-metrics= 2>&1); rc=$?
check "--list-metrics= (no number) is refused (rc $rc)" test "$rc" -eq 2
# Without a driver (CI) the listing says why in one line; with one, it lists the chip's metrics.
out=$("$launcher" --list-metrics 2>&1); rc=$?
if [[ $rc -eq 0 ]]; then
  check "--list-metrics lists the chip's metrics" grep -q "^# the metrics of " <<<"$out"
else
  check "--list-metrics without a driver or CUPTI fails in one line (rc $rc): $out" \
    test "$rc" -eq 1 -a "$(grep -c -- "--list-metrics: " <<<"$out")" -eq 1
fi
out=$("$launcher" -- /nonexistent/program 2>&1); rc=$?
check "a program that cannot run gives 127 (rc $rc)" test "$rc" -eq 127

env_out=$(KREPLAY_REPLAY_VERIFY=1 CUDA_INJECTION64_PATH=/other.so "$launcher" --passes 3 --tier=device \
          --kernel-name '^gemm' --exclude '' -o /tmp/r.csv --debug-no-restore -- env 2>/tmp/kreplay_launcher_err.$$)
rc=$?
check "the program runs (rc $rc)" test "$rc" -eq 0
check "the other injection library is replaced, with a line" grep -q "CUDA_INJECTION64_PATH=/other.so is replaced" \
  /tmp/kreplay_launcher_err.$$
rm -f /tmp/kreplay_launcher_err.$$
library=$(sed -n 's/^CUDA_INJECTION64_PATH=//p' <<<"$env_out")
check "CUDA_INJECTION64_PATH names the injection library ($library)" test -f "$library"
check "the library is libkreplay_cuda_inject.so" test "$(basename "$library")" = libkreplay_cuda_inject.so
for expected in KREPLAY_REPLAY=1 KREPLAY_REPLAY_PASSES=3 KREPLAY_REPLAY_TIER=device \
                'KREPLAY_REPLAY_KERNEL_NAME=^gemm' KREPLAY_REPLAY_EXCLUDE= KREPLAY_REPLAY_OUTPUT=/tmp/r.csv \
                KREPLAY_REPLAY_RESTORE=0; do
  check "the program sees $expected" grep -qx -- "$expected" <<<"$env_out"
done
check "the report's path is made absolute" grep -qx "KREPLAY_REPLAY_OUTPUT=$PWD/r2.csv" \
  <<<"$("$launcher" --output=r2.csv -- env)"
check "-oFILE works too" grep -qx "KREPLAY_REPLAY_OUTPUT=$PWD/r3.csv" <<<"$("$launcher" -or3.csv -- env)"
pid_line=$(KREPLAY_INJECT_TRACKING=0 "$launcher" -- sh -c 'echo "pid=$$"; env')
check "the program keeps the launcher's process id, which it is told" \
  test "$(sed -n 's/^pid=//p' <<<"$pid_line")" = "$(sed -n 's/^KREPLAY_REPLAY_PID=//p' <<<"$pid_line")"
check "a caller's KREPLAY_INJECT_TRACKING=0 does not turn the replay off" grep -qx "KREPLAY_INJECT_TRACKING=1" \
  <<<"$pid_line"
check "a stale KREPLAY_REPLAY_VERIFY from the caller is removed" bash -c '! grep -q "^KREPLAY_REPLAY_VERIFY=" <<<"$1"' _ "$env_out"
out=$("$launcher" -- sh -c 'exit 7' 2>&1); rc=$?
check "the program's exit status is the launcher's (rc $rc)" test "$rc" -eq 7

# Installed: bin/kreplay-cuda-replay finds lib/libkreplay_cuda_inject.so; without it, a clear refusal.
prefix=$(mktemp -d)
mkdir -p "$prefix/bin" "$prefix/lib"
cp "$launcher" "$prefix/bin/"
out=$("$prefix/bin/kreplay-cuda-replay" -- true 2>&1); rc=$?
check "without the library beside it or in ../lib: refused (rc $rc)" test "$rc" -eq 2
check "the refusal says where it looked" grep -q "is not in $prefix/bin/../lib" <<<"$out"
cp "$library_built" "$prefix/lib/"
found=$("$prefix/bin/kreplay-cuda-replay" -- env | sed -n 's/^CUDA_INJECTION64_PATH=//p')
check "installed: the library is found in ../lib ($found)" test "$found" = "$prefix/lib/libkreplay_cuda_inject.so"
rm -rf "$prefix"

echo "$failures failed"
exit $((failures != 0))
