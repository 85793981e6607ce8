#!/usr/bin/env bash
# Runs every test of the workspace, interop tests against the real Lance
# (pylance, pinned in requirements-interop.txt) included, and checks that
# the benchmarks (programs, run on demand) still compile, and runs the
# examples (each asserts what it shows).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -r requirements-interop.txt
export FATHOM_REQUIRE_PYLANCE=1
cargo test --workspace
for example in embed indexes_and_explain time_travel; do
  echo "== example $example"
  cargo run --quiet -p fathom-examples --example "$example"
done
cargo test --workspace --benches --no-run
