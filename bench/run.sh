#!/bin/sh
# Build cotangent's benchmark programs in release, run them and the peer frameworks, print tables.
# Usage: bench/run.sh [overhead matmul mlp custom_vjp checkpoint_memory gated_delta] [--quick] ...
# See bench/README.md (peer Python: --python, else $PEERS_PYTHON, else python3).
exec python3 "$(dirname "$0")/compare.py" "$@"
