#!/usr/bin/env sh
# Install okgit from this checkout into the active Python environment.
#
#   scripts/install.sh            okgit with every default feature (offline search, the LLM
#                                 path through litellm, the live view, reports)
#   scripts/install.sh test       the same, plus what the test suite needs
#   scripts/install.sh core       okgit without litellm (no --model); any extras may follow
#
# On a machine without an NVIDIA GPU (no nvidia-smi), torch is installed first as a CPU
# build: left alone, pip resolves torch to the CUDA build and downloads several GB of CUDA
# libraries that nothing can use there. A torch that is already installed is kept.
# Variables: PYTHON (default python3), OKGIT_TORCH (the CPU torch to install, default
# torch==2.13.0, the version CI tests), OKGIT_TORCH_INDEX (the CPU wheel index, default
# https://download.pytorch.org/whl/cpu; when it cannot be reached, pip's own configured
# indexes are used, which must then hold a CPU build, as an offline wheel mirror does).
set -eu
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
llm=llm
extras=""
for arg in "$@"; do
  case "$arg" in
    core) llm="" ;;
    llm|test|parquet|modal) extras="${extras:+$extras,}$arg" ;;
    *) echo "install.sh: unknown argument '$arg' (expected: core, test, llm, parquet, modal)" >&2; exit 2 ;;
  esac
done

if ! command -v nvidia-smi >/dev/null 2>&1 && ! "$python" -c "import torch" >/dev/null 2>&1; then
  index=${OKGIT_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
  if "$python" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + '/torch/', timeout=5)" "$index" >/dev/null 2>&1; then
    echo "install.sh: no NVIDIA GPU here (no nvidia-smi): torch from the CPU wheel index $index"
    "$python" -m pip install "${OKGIT_TORCH:-torch==2.13.0}" --index-url "$index"
  else
    # No route to the CPU index (an offline mirror, a proxy): the configured indexes must
    # hold a CPU build of the pinned version, as a local wheel mirror does.
    echo "install.sh: no NVIDIA GPU here and $index is unreachable: ${OKGIT_TORCH:-torch==2.13.0} from pip's configured indexes"
    "$python" -m pip install "${OKGIT_TORCH:-torch==2.13.0}"
  fi
  "$python" -W ignore -c "import torch, sys; sys.exit(torch.version.cuda is not None and 'install.sh: pip picked a CUDA build of torch; set OKGIT_TORCH_INDEX to a CPU wheel index')"
fi
extras="$llm${llm:+${extras:+,}}$extras"
"$python" -m pip install -e ".${extras:+[$extras]}"
