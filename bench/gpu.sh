#!/bin/bash
# One device call: bash bench/gpu.sh STAGE[:RANGE] [STAGE[:RANGE] ...]   (run from the repository root)
#
#   tests            pytest -m gpu tests/eval/test_eval_gpu.py                      (~2-3 min)
#   eval[:A-B]       bench/eval.py over example ops A-B (default 1-10)         (~45-60 s per op)
#   offline[:A-B]    bench/offline.py: okgit bench kernelbench over examples A-B (default all),
#                    --parallel 4 --iterations 4; resumes from bench/resume.json (an earlier
#                    call's offline.json, carried) when present
#   space[:LIST]     bench/space.py: the template kernels' launch settings explored against eager and
#                    torch.compile, over example ops LIST (e.g. 11,5-8; default 4-11); SPACE_ARGS=--defaults
#                    times the settings as proposed, without the walk
#   realsize[:A-B]   bench/realsize.py over the development set (.kb/, a copy of ../shared/kernelbench,
#                    carried), levels REALSIZE_LEVELS (default "2 1"), problems A-B; resumes from
#                    bench/results/realsize-resume.json when present
#   gemm             bench/gemm.py: the split-precision GEMM family's configurations on bare GEMMs, then the
#                    development set's GEMM-bound problems (.kb/, carried) against eager and torch.compile;
#                    GEMM_ARGS passes more (--no-compile, --family-only, --no-family, --problems ...)
#   storegemm        bench/store_gemm.py: L1/9's store-bound GEMM (a 4 GiB C from a K of 32): the floor of
#                    writing C, cuBLAS, okgit's GEMM kind at its settings, kernels of its own (~4 min);
#                    STORE_GEMM_ARGS passes more (--parts okgit,own)
#   conv             bench/conv.py: the implicit-GEMM convolutions against eager (both layouts) and torch.compile
#                    on the development set's convolution problems (.kb/, carried); CONV_ARGS passes more
#                    (--problems "2:7,87 1:63", --no-compile, --no-tiles)
#   trust            bench/trust.py (issue 20): the contract's GPU tests, the batch-norm problems with the
#                    cross-check, 8 development problems at --parallel 6 and alone (.kb/, carried); resumes
#                    from bench/results/trust-resume.json when present
#   facts            only the torch/triton/GPU facts
#   smoke            both scripts' --smoke (CPU): checks the plumbing, needs no GPU
#
# Installs the carried wheels (.whl/, made by ../shared/scripts/device-wheels.sh) into
# /tmp/site, prints the facts, then runs each stage under `timeout`, so the whole call ends
# inside BUDGET_S seconds (default 560, for a 600 s call). Each script also gets its own
# --time-limit a little shorter, so it ends by itself and writes its table and JSON; `timeout`
# is the backstop. Everything lands flat in $OUT (default /tmp/okgit-gpu-out): gpu.log (the
# whole transcript), tests.xml, bench_eval.json, offline.json, offline.md, journals.jsonl, space.json.
# Exit status: 0 when every stage ended 0, else the last failing stage's (124: its time limit).
# GPU_SH_SKIP_WHEELS=1 skips the install (for a check of this script off the device).
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # harmless on one GPU
export PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/okgit-gpu-out}"
export OUT
mkdir -p "$OUT"
LOG="$OUT/gpu.log"
BUDGET_S="${BUDGET_S:-560}"
START=$SECONDS

say() { echo "[gpu.sh +$((SECONDS - START))s] $*" | tee -a "$LOG"; }
usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

[ $# -ge 1 ] || usage
seen=" "
for arg in "$@"; do
  stage="${arg%%:*}"; range="${arg#"$stage"}"; range="${range#:}"
  case "$stage" in tests|eval|offline|space|realsize|trust|gemm|storegemm|conv|facts|smoke) ;; *) echo "unknown stage: $arg" >&2; usage;; esac
  if [ -n "$range" ] && ! [[ "$range" =~ ^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$ ]]; then echo "bad range in $arg (want A-B or a list A,B-C)" >&2; exit 2; fi
  case "$seen" in *" $stage "*) echo "stage $stage twice in one call: its JSON would be overwritten" >&2; exit 2;; esac
  seen="$seen$stage "
done

# --- wheels and facts ----------------------------------------------------------------------------
if [ "${GPU_SH_SKIP_WHEELS:-0}" = 1 ]; then
  say "wheels: skipped (GPU_SH_SKIP_WHEELS=1)"
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
elif compgen -G ".whl/*.whl" > /dev/null; then
  if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tee -a "$LOG"; then
    say "wheels: $(ls .whl/*.whl | wc -l) installed into /tmp/site"
  else
    say "wheels: install FAILED (see above); going on with the image's packages"
  fi
  export PYTHONPATH="/tmp/site:$PWD"
else
  say "wheels: no .whl/ here (carry [\".whl\"]); using the image's packages"
  export PYTHONPATH="$PWD"
fi
python3 - <<'PY' 2>&1 | tee -a "$LOG"
import importlib, platform, sys
print(f"python {platform.python_version()} at {sys.executable}")
import torch
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuda available {torch.cuda.is_available()}, "
      f"{torch.cuda.device_count()} GPU(s)")
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"  cuda:{i} {p.name}, {p.total_memory / 2**30:.0f} GiB, sm_{p.major}{p.minor}, {p.multi_processor_count} SMs")
for name in ("triton", "pydantic", "okgit"):
    try:
        m = importlib.import_module(name)
        print(f"{name} {getattr(m, '__version__', '?')} from {getattr(m, '__file__', '?')}")
    except Exception as e:  # noqa: BLE001
        print(f"{name}: NOT importable: {type(e).__name__}: {e}")
PY
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total,utilization.gpu --format=csv,noheader 2>&1 | tee -a "$LOG"

GPU_OK=""
need_gpu() {  # checked once per call (a torch import costs seconds)
  if [ -z "$GPU_OK" ]; then
    python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' && GPU_OK=1 || GPU_OK=0
  fi
  [ "$GPU_OK" = 1 ] && return 0
  say "stage $1: no CUDA GPU visible: not run"
  return 3
}

# --- stages --------------------------------------------------------------------------------------
# run_stage NAME DEFAULT_LIMIT_S CMD: CMD (one string, run by bash -c) may use $LIMIT, its own
# --time-limit 30 s inside the stage's `timeout`, and $OUT
final=0
run_stage() {
  local name="$1" want="$2"; shift 2
  local left=$((BUDGET_S - (SECONDS - START) - 10))
  local limit=$((want < left ? want : left))
  if [ "$limit" -lt 30 ]; then
    say "stage $name: not started, $left s left of BUDGET_S=$BUDGET_S"
    final=124; return
  fi
  export LIMIT=$((limit - 30))
  say "stage $name: limit ${limit}s, LIMIT=$LIMIT: $1"
  timeout -k 20 -s TERM "$limit" bash -c "$1" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  say "stage $name: exit $rc$([ "$rc" = 124 ] && echo ' (time limit: partial results)')"
  [ "$rc" = 0 ] || final=$rc
}

for arg in "$@"; do
  stage="${arg%%:*}"; range="${arg#"$stage"}"; range="${range#:}"
  case "$stage" in
    facts) ;;
    tests)  # one process (-o addopts=): the device carries okgit's dependencies, not pytest-xdist
      need_gpu tests || { final=3; continue; }
      run_stage tests 300 'python3 -m pytest -o addopts= -m gpu tests/eval/test_eval_gpu.py -q -rA -p no:cacheprovider --junitxml="$OUT/tests.xml"' ;;
    eval)
      need_gpu eval || { final=3; continue; }
      run_stage eval 560 'python3 bench/eval.py --range '"${range:-1-10}"' --repeats 2 --aa-rounds 3 --time-limit $LIMIT' ;;
    offline)
      need_gpu offline || { final=3; continue; }
      resume=""; [ -f bench/resume.json ] && resume="--resume-from bench/resume.json"
      run_stage offline 560 'python3 bench/offline.py --parallel 4 --iterations 4 '"${range:+--problems $range} $resume"' --time-limit $LIMIT' ;;
    space)
      need_gpu space || { final=3; continue; }
      run_stage space 560 'python3 bench/space.py --problems '"${range:-4-11}"' ${SPACE_ARGS:-} --time-limit $LIMIT' ;;
    realsize)
      need_gpu realsize || { final=3; continue; }
      resume=""; [ -f bench/results/realsize-resume.json ] && resume="--resume bench/results/realsize-resume.json"
      run_stage realsize 560 'python3 bench/realsize.py --kb .kb --level '"${REALSIZE_LEVELS:-2 1}"' '"${range:+--problems $range} $resume"' --time-limit $LIMIT' ;;
    gemm)
      need_gpu gemm || { final=3; continue; }
      run_stage gemm 330 'python3 bench/gemm.py --kb .kb ${GEMM_ARGS:-} --time-limit $LIMIT' ;;
    storegemm)  # its --time-limit starts no arm after it; setup and the arm under way take up to 60 s more
      need_gpu storegemm || { final=3; continue; }
      run_stage storegemm 260 'python3 bench/store_gemm.py --kb .kb ${STORE_GEMM_ARGS:-} --time-limit $((LIMIT - 60))' ;;
    conv)
      need_gpu conv || { final=3; continue; }
      # its --time-limit starts no problem after it; the problem under way may take 60 s more
      run_stage conv 240 'python3 bench/conv.py --kb .kb ${CONV_ARGS:-} --time-limit $((LIMIT - 60))' ;;
    trust)
      need_gpu trust || { final=3; continue; }
      resume=""; [ -f bench/results/trust-resume.json ] && resume="--resume bench/results/trust-resume.json"
      run_stage trust 560 'python3 bench/trust.py --kb .kb '"$resume"' --time-limit $LIMIT' ;;
    smoke)
      run_stage smoke-eval 120 'python3 bench/eval.py --smoke'
      run_stage smoke-offline 120 'python3 bench/offline.py --smoke'
      run_stage smoke-space 120 'python3 bench/space.py --smoke' ;;
  esac
done
say "done: exit $final; files in $OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
exit "$final"
