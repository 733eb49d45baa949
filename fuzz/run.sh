#!/usr/bin/env bash
# Runs the api_sequence fuzz target for a bounded time, starting from the committed corpus.
#
#   fuzz/run.sh [seconds]      (default 60; needs nightly and cargo-fuzz: cargo install cargo-fuzz --locked)
#
# New inputs go to a scratch directory, so the committed corpus stays small; a failing input is written to
# fuzz/artifacts/api_sequence/ and the script exits non-zero. Reproduce one with
#   cargo +nightly fuzz run api_sequence fuzz/artifacts/api_sequence/<file>
set -euo pipefail
seconds="${1:-60}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
cd "$here"
cargo +nightly fuzz build api_sequence
cargo +nightly fuzz run api_sequence "$scratch" corpus/api_sequence -- \
  -max_total_time="$seconds" -max_len=1024 -print_final_stats=1
