#!/bin/sh
# Install vocabcheck into the current Python environment.
#   sh install.sh          the tool
#   sh install.sh --test   the tool and what its test suite needs
# torch: if this Python has no torch yet, the CPU build of torch 2.13.0 is installed first (an unpinned
# `torch` would pull a multi-GB CUDA build). On a GPU machine, install your own CUDA torch first; it is kept.
set -eu
cd "$(dirname "$0")"
PYTHON="${PYTHON:-python3}"
TORCH_SPEC="${VOCABCHECK_TORCH:-torch==2.13.0}"
if ! "$PYTHON" -c "import torch" >/dev/null 2>&1; then
    echo "install.sh: no torch in $("$PYTHON" -c 'import sys; print(sys.prefix)'); installing the CPU build ($TORCH_SPEC)"
    "$PYTHON" -m pip install --quiet "$TORCH_SPEC"
fi
if [ "${1:-}" = "--test" ]; then
    "$PYTHON" -m pip install --quiet -e ".[test]"
else
    "$PYTHON" -m pip install --quiet -e .
fi
