#!/usr/bin/env bash
# Builds .kbpkg/: KernelBench's own `kernelbench` package (src/kernelbench of a checkout, upstream
# commit 423217d), for `--cross-check` on a GPU machine without network. Put .kbpkg on PYTHONPATH.
#
#   bash bench/kbpkg.sh KERNELBENCH_CHECKOUT
#
# kernelbench/__init__.py imports its utils, which import the LLM clients `openai` and `litellm`
# at module level (about 60 MB of wheels with their dependencies, over what a device call
# carries). Its evaluation (eval_kernel_against_ref) never calls them: .kbpkg gets two stand-in
# modules of those names that raise if called. Everything else is the real package and its real
# small dependencies (python-dotenv, tqdm, requests), as wheels for CPython 3.12.
set -euo pipefail
src=${1:?usage: bash bench/kbpkg.sh KERNELBENCH_CHECKOUT}
out=$(cd "$(dirname "$0")/.." && pwd)/.kbpkg
rm -rf "$out" && mkdir -p "$out"
if [ -d "$src/.git" ] || [ -f "$src/HEAD" ]; then
  git --git-dir="$( [ -d "$src/.git" ] && echo "$src/.git" || echo "$src")" archive HEAD src/kernelbench | tar -x -C "$out"
else
  mkdir -p "$out/src" && cp -r "$src/src/kernelbench" "$out/src/"
fi
mv "$out/src/kernelbench" "$out/kernelbench" && rmdir "$out/src"
for name in openai litellm; do
  mkdir -p "$out/$name"
  cat >"$out/$name/__init__.py" <<PY
"""Stand-in for the LLM client \`$name\` (bench/kbpkg.sh): KernelBench's evaluation never calls it."""


def _absent(*args, **kwargs):
    raise RuntimeError("$name is not installed on this machine (bench/kbpkg.sh)")


OpenAI = completion = _absent
PY
done
pip download -q --disable-pip-version-check --only-binary=:all: --no-deps --python-version 3.12 --platform manylinux2014_x86_64 --platform any \
  -d "$out/.wheels" python-dotenv tqdm requests urllib3 idna certifi charset-normalizer
for w in "$out"/.wheels/*.whl; do python3 -m zipfile -e "$w" "$out"; done  # wheels are zips: unpacked as is, for 3.12
rm -rf "$out/.wheels"
du -sh "$out"
