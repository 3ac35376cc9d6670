"""Coverage of a KernelBench development set by okgit's own kernels, with no model (CPU, no timing).

    python3 bench/coverage.py [KB] [--levels 1,2] [--problems 1:90,93] [--eval] [--out FILE]

For each problem the reference is captured as the template proposer captures it (okgit.lower
.capture: traced on the meta device at its default knobs, so the capture costs no memory at
any size), and every candidate the proposer would make is rendered. Per problem: the op class
of its heaviest ATen call (from the exported graph), whether okgit's own kernels cover it
(`yes`: every computing call is in a kernel of okgit's own; `partly`: some PyTorch calls stay,
listed as externs; `no`: no candidate, with the proposer's note saying why), the template kinds
that claim its groups, in the candidate with the fewest externs.

--eval judges that candidate (the first correct one of them, in the proposer's order) with
okgit's evaluator on this machine's CPU: Triton's interpreter at the sizes okgit scales a CPU
run to, correctness only (minutes for a whole level).

Prints a markdown table and its summary and writes them to --out (default
bench/results/coverage-<date>.md). KB is the folder holding `level1/`, `level2/`, ...
(default /work/shared/kernelbench/KernelBench).
"""

from __future__ import annotations

import argparse
import datetime
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The class of an ATen call, heaviest first: a problem's class is that of its heaviest call
CLASSES = ("attention", "convolution", "matmul", "pooling", "scan", "normalisation", "loss", "softmax",
           "sort or selection", "reduction", "resampling", "random", "data movement", "elementwise")
MORE_CLASSES = {  # classes of calls the lowering takes (okgit.lower.translate.OP_CLASSES names the rest)
    **dict.fromkeys(("scaled_dot_product_attention", "_scaled_dot_product_flash_attention"), "attention"),
    **dict.fromkeys(("layer_norm", "rms_norm", "native_layer_norm", "native_batch_norm", "native_group_norm"),
                    "normalisation"),
    **dict.fromkeys(("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "triplet_margin_loss", "kl_div",
                     "cross_entropy_loss", "nll_loss", "nll_loss_nd", "binary_cross_entropy_with_logits",
                     "binary_cross_entropy", "hinge_embedding_loss", "cosine_embedding_loss", "margin_ranking_loss"),
                    "loss"),
    **dict.fromkeys(("softmax", "_softmax", "log_softmax", "_log_softmax", "logsumexp"), "softmax"),
    **dict.fromkeys(("sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "prod", "var", "std",
                     "linalg_vector_norm", "norm", "cosine_similarity"), "reduction"),
    **dict.fromkeys(("tril", "triu", "diag", "diagonal"), "data movement"),
}
# PyTorch calls that move no data (a view): kept in a forward, they cost nothing
VIEWS = {"view", "_unsafe_view", "reshape", "expand", "numpy_T", "t", "transpose", "permute", "unsqueeze", "squeeze",
         "alias", "detach", "select", "slice", "getitem", "unflatten", "flatten"}


@dataclass
class Row:
    level: int
    problem: str  # "<id>_<Name>"
    klass: str = "?"
    covered: str = "no"  # yes | partly | no
    kinds: str = ""  # the origin tag of the candidate with the fewest externs
    externs: list[str] = field(default_factory=list)
    note: str = ""
    verdict: str = ""  # --eval: the evaluator's status of the first correct candidate, or why none
    sources: list[str] = field(default_factory=list)  # the candidates, fewest externs first


def op_class(source: str) -> str:
    """The class of the heaviest ATen call in the exported reference ("?" if it cannot be exported)."""
    import torch

    from okgit.lower.trace import instantiate
    from okgit.lower.translate import OP_CLASSES

    try:
        _, model, inputs = instantiate(source, {})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = torch.export.export(model, inputs, strict=False)
    except Exception:  # noqa: BLE001 - a survey row, not a verdict
        return "?"
    found = set()
    for n in ep.graph.nodes:
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload):
            name = n.target._opname
            found.add(MORE_CLASSES.get(name) or OP_CLASSES.get(name) or "elementwise")
    return next((c for c in CLASSES if c in found), "elementwise")


def survey(path: Path, level: int) -> Row:
    """The proposer's candidates for one problem, the one with the fewest externs first."""
    from okgit.lower.capture import capture
    from okgit.lower.fusion import Group
    from okgit.lower.graph import Unsupported
    from okgit.lower.translate import op_description
    from okgit.problem import load_problem
    from okgit.search.proposers.templates import Made, made

    row = Row(level, path.stem)
    source = path.read_text()
    row.klass = op_class(source)
    notes: list[str] = []
    found: list[tuple[list[str], str, str]] = []  # (externs, origin, source)
    try:
        graph = capture(load_problem(path, root=str(path.parent)))
    except Unsupported as e:
        row.note = f"capture: {e}"
        return row
    for m in made(graph, source, "cuda"):  # the survey is of what a GPU run proposes
        if not isinstance(m, Made):
            notes.append(str(m[1]))  # the same reason for each set of optional kinds, said once
            continue
        kept = [n for n in m.items if not isinstance(n, Group) and n.op.split(".")[1 if "." in n.op else 0] not in VIEWS]
        found.append((list(dict.fromkeys(op_description(n) for n in kept)), m.low.origin(), m.source))
    if not found:
        row.note = "; ".join(dict.fromkeys(notes))
        return row
    found.sort(key=lambda m: len(m[0]))  # stable: the proposer's order among equals
    row.externs, row.kinds = found[0][0], found[0][1].removeprefix("template:")
    row.covered = "partly" if row.externs else "yes"
    row.sources = [m[2] for m in found]
    return row


def judge(row: Row, path: Path, evaluator) -> None:
    """The first candidate the evaluator finds correct (CPU: the interpreter, at scaled sizes)."""
    from okgit.errors import OkgitError
    from okgit.problem import load_problem

    problem = load_problem(path, root=str(path.parent))
    whys = []
    for source in row.sources:
        try:
            result = evaluator.evaluate(problem, source, mode="fast", backend="triton")
        except OkgitError as e:  # the reference itself does not run at the CPU's sizes
            row.verdict = str(e).split(": ", 1)[-1][:160]
            return
        if result.correct:
            row.verdict = result.status.value
            return
        first = (result.error.message.strip().splitlines() or [""])[0][:120] if result.error else ""
        whys.append(f"{result.status.value}{f' ({result.error.gate}: {first})' if result.error else ''}")
    row.verdict = "; ".join(whys) or "no candidate"


def problems(kb: Path, levels: list[int], only: dict[int, set[int]]) -> list[tuple[int, Path]]:
    out = []
    for level in levels:
        files = sorted((kb / f"level{level}").glob("*.py"), key=lambda p: int(p.name.split("_")[0]))
        out += [(level, p) for p in files if not only or int(p.name.split("_")[0]) in only.get(level, ())]
    return out


def table(rows: list[Row], evaluated: bool) -> str:
    head = ["level", "problem", "class", "covered", "kinds", "externs", "note"] + (["evaluator (CPU)"] if evaluated else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [str(r.level), r.problem, r.klass, r.covered, r.kinds, ", ".join(r.externs), r.note.replace("|", "/")]
        lines.append("| " + " | ".join(cells + ([r.verdict] if evaluated else [])) + " |")
    return "\n".join(lines)


def summary(rows: list[Row]) -> str:
    """Covered counts per level and together, and per class the problems not wholly covered."""
    lines = []
    for name, sub in [(f"level {lv}", [r for r in rows if r.level == lv]) for lv in sorted({r.level for r in rows})] + [("all", rows)]:
        if not sub:
            continue
        n = len(sub)
        yes, partly = sum(r.covered == "yes" for r in sub), sum(r.covered == "partly" for r in sub)
        lines.append(f"- {name}: {n} problems; a kernel of okgit's own on {yes + partly} ({100 * (yes + partly) / n:.0f}%): "
                     f"all of it {yes}, with PyTorch calls beside it {partly}; none {n - yes - partly}")
    by_class: dict[str, list[str]] = {}
    for r in rows:
        if r.covered != "yes":
            by_class.setdefault(r.klass, []).append(f"{r.level}/{r.problem.split('_')[0]}{'' if r.covered == 'no' else '*'}")
    lines.append("- not wholly covered, by class (`*`: partly): " + "; ".join(
        f"{c}: {', '.join(v)}" for c, v in sorted(by_class.items(), key=lambda kv: CLASSES.index(kv[0]) if kv[0] in CLASSES else 99)))
    return "\n".join(lines)


def parse_only(spec: str | None) -> dict[int, set[int]]:
    """`1:90,93;2:3` -> {1: {90, 93}, 2: {3}}."""
    out: dict[int, set[int]] = {}
    for part in filter(None, (spec or "").split(";")):
        level, ids = part.split(":")
        out[int(level)] = {int(i) for i in ids.split(",")}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kb", nargs="?", default="/work/shared/kernelbench/KernelBench")
    parser.add_argument("--levels", default="1,2")
    parser.add_argument("--problems", help="LEVEL:ID,ID[;LEVEL:ID,...]: only these")
    parser.add_argument("--eval", action="store_true", help="judge the candidates with the evaluator on the CPU")
    parser.add_argument("--out", help="the markdown file (default bench/results/coverage-<date>.md)")
    args = parser.parse_args()
    kb = Path(args.kb)
    if not kb.is_dir():
        print(f"{kb}: no such folder", file=sys.stderr)
        return 1
    todo = problems(kb, [int(x) for x in args.levels.split(",")], parse_only(args.problems))
    evaluator = None
    if args.eval:
        from okgit.eval.parent.local import LocalEvaluator

        evaluator = LocalEvaluator(device="cpu", prestart=False)
    rows = []
    try:
        for level, path in todo:
            row = survey(path, level)
            if evaluator is not None and row.sources:
                judge(row, path, evaluator)
            print(f"{level}/{row.problem}: {row.covered} {row.kinds} {row.verdict}".rstrip(), file=sys.stderr, flush=True)
            rows.append(row)
    finally:
        if evaluator is not None:
            evaluator.close()
    date = datetime.date.today().isoformat()
    flags = (f" --problems \"{args.problems}\"" if args.problems else "") + (" --eval" if args.eval else "")
    text = (f"# Coverage of {kb} by okgit's own kernels ({date})\n\n`python3 bench/coverage.py{flags}` "
            "(no model; templates as the proposer renders them)\n\n"
            f"{summary(rows)}\n\n{table(rows, args.eval)}\n")
    print(text)
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / f"coverage-{date}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
