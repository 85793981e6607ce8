#!/usr/bin/env bash
# Runs every test of the workspace, interop tests against the real Lance
# (pylance, pinned in requirements-interop.txt) included, and checks that
# the benchmarks (programs, run on demand) still compile. The examples
# (examples/, each asserting what it shows) run as tests.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -r requirements-interop.txt
export FATHOM_REQUIRE_PYLANCE=1
cargo test --workspace
cargo test --workspace --benches --no-run
