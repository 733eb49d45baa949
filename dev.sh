#!/usr/bin/env bash
# kreplay's two commands (see README.md):
#
#   ./dev.sh demo [demo arguments...]   build the demo and run it
#   ./dev.sh test [--preset <name>]     run every test: the Rust tests, then the C/C++ tests under ctest
#
# Both set themselves up on a fresh machine: they need Rust (cargo), gcc/g++ and python3 with pip. CMake
# (3.21 or later) and Ninja are taken from PATH when suitable, otherwise installed from PyPI into build/.tools.
# `test --preset asan|tsan|debug` builds and runs only the C/C++ side of that CMake preset (sanitizers change
# nothing in the Rust tests). Where nvcc is found ($CUDACXX, PATH, /usr/local/cuda/bin) the CUDA adapter and
# its GPU-free tests (ctest label `cuda`) are built and run too; tests labelled `gpu` never run here (they need
# a GPU: c-tests/cuda/README.md). CI runs `./dev.sh test` (.ci/run).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$root"
tools_dir="$root/build/.tools"
min_cmake=3.21

say() { printf '\n==> %s\n' "$*"; }
die() { printf 'dev.sh: %s\n' "$*" >&2; exit 1; }

usage() {
  sed -n '2,14s/^# \{0,1\}//p' "$0"
}

# version_at_least <have> <need>
version_at_least() {
  printf '%s\n%s\n' "$2" "$1" | sort -V -C
}

# Prints the version of a cmake binary, or nothing if it does not run.
cmake_version() {
  local text
  text="$("$1" --version 2>/dev/null)" || return 0
  text="${text%%$'\n'*}"
  printf '%s' "${text##* }"
}

# Sets CMAKE, CTEST and NINJA, installing from PyPI what PATH lacks.
find_tools() {
  CMAKE="" CTEST="" NINJA=""
  local candidate version
  for candidate in "$(command -v cmake || true)" "$tools_dir/cmake/data/bin/cmake"; do
    [[ -n "$candidate" && -x "$candidate" ]] || continue
    version="$(cmake_version "$candidate")"
    if [[ -n "$version" ]] && version_at_least "$version" "$min_cmake"; then
      CMAKE="$candidate"
      break
    fi
  done
  for candidate in "$(command -v ninja || true)" "$tools_dir/bin/ninja" "$tools_dir/ninja/data/bin/ninja"; do
    if [[ -n "$candidate" && -x "$candidate" ]] && "$candidate" --version >/dev/null 2>&1; then
      NINJA="$candidate"
      break
    fi
  done

  local missing=()
  [[ -n "$CMAKE" ]] || missing+=(cmake)
  [[ -n "$NINJA" ]] || missing+=(ninja)
  if ((${#missing[@]} > 0)); then
    say "installing ${missing[*]} from PyPI into build/.tools (none suitable on PATH)"
    python3 -m pip --version >/dev/null 2>&1 ||
      die "python3 -m pip is not available: install pip (Debian: apt-get install python3-pip)"
    # CI runs as root; pip's warning about that is noise for a private --target folder.
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install --disable-pip-version-check --no-input --quiet --upgrade \
      --target "$tools_dir" "${missing[@]}" ||
      die "could not install ${missing[*]} with pip"
    [[ -n "$CMAKE" ]] || CMAKE="$tools_dir/cmake/data/bin/cmake"
    if [[ -z "$NINJA" ]]; then
      for candidate in "$tools_dir/bin/ninja" "$tools_dir/ninja/data/bin/ninja"; do
        if [[ -x "$candidate" ]]; then NINJA="$candidate"; break; fi
      done
    fi
    version="$(cmake_version "$CMAKE")"
    [[ -n "$version" ]] && version_at_least "$version" "$min_cmake" ||
      die "the cmake installed into build/.tools does not run"
    [[ -n "$NINJA" ]] && "$NINJA" --version >/dev/null 2>&1 ||
      die "the ninja installed into build/.tools does not run"
  fi

  CTEST="$(dirname "$CMAKE")/ctest"
  [[ -x "$CTEST" ]] || CTEST="$(command -v ctest || true)"
  [[ -n "$CTEST" ]] || die "no ctest next to $CMAKE"
  # The presets use the Ninja generator, which looks for `ninja` on PATH.
  PATH="$(dirname "$NINJA"):$PATH"
  export PATH

  if ! command -v cargo >/dev/null 2>&1 && [[ -x "$HOME/.cargo/bin/cargo" ]]; then
    PATH="$HOME/.cargo/bin:$PATH"
  fi
  command -v cargo >/dev/null 2>&1 || die "cargo not found: install Rust (https://rustup.rs)"
  printf 'dev.sh: cmake %s (%s), ninja %s, %s\n' "$(cmake_version "$CMAKE")" "$CMAKE" \
    "$("$NINJA" --version)" "$(cargo --version)"
}

# Exports CUDACXX for CMake's KREPLAY_BUILD_CUDA=AUTO when an nvcc is found, and says which, or that the CUDA
# part is skipped.
find_nvcc() {
  local candidate
  for candidate in "${CUDACXX:-}" "$(command -v nvcc || true)" /usr/local/cuda/bin/nvcc; do
    if [[ -n "$candidate" && -x "$candidate" ]] && "$candidate" --version >/dev/null 2>&1; then
      export CUDACXX="$candidate"
      printf 'dev.sh: nvcc %s (%s): the CUDA adapter and its GPU-free tests are built\n' \
        "$("$candidate" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')" "$candidate"
      return 0
    fi
  done
  printf 'dev.sh: no nvcc ($CUDACXX, PATH, /usr/local/cuda/bin): the CUDA adapter and its tests are skipped\n'
}

configure() {
  say "cmake --preset $1"
  "$CMAKE" --preset "$1"
}

build() {
  say "cmake --build --preset $*"
  "$CMAKE" --build --preset "$@"
}

cmd_demo() {
  find_tools
  configure default
  # Written at configure time when the demo's folder defines kreplay_demo.
  local path_file="$root/build/default/kreplay_demo_path.txt"
  if [[ ! -f "$path_file" ]]; then
    die "the demo target kreplay_demo is missing (c-tests/demo/CMakeLists.txt does not define it yet)"
  fi
  build default --target kreplay_demo
  local demo
  demo="$(<"$path_file")"
  say "$demo $*"
  exec "$demo" "$@"
}

cmd_test() {
  local preset=default
  while (($# > 0)); do
    case "$1" in
      --preset) (($# >= 2)) || die "--preset needs a name"; preset="$2"; shift 2 ;;
      --preset=*) preset="${1#--preset=}"; shift ;;
      *) die "test: unknown argument '$1' (see ./dev.sh --help)" ;;
    esac
  done
  find_tools
  find_nvcc
  if [[ "$preset" == default ]]; then
    # The header check under ctest shares this target directory, so cbindgen is compiled once.
    say "cargo test --workspace"
    CARGO_TARGET_DIR="$root/build/default/cargo/test" cargo test --workspace --quiet
  fi
  configure "$preset"
  build "$preset"
  say "ctest --preset $preset"
  "$CTEST" --preset "$preset" --output-on-failure --label-exclude '^gpu$'
}

case "${1:-}" in
  demo) shift; cmd_demo "$@" ;;
  test) shift; cmd_test "$@" ;;
  -h | --help | help) usage ;;
  *) usage >&2; exit 2 ;;
esac
