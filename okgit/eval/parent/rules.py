"""Every gate of the evaluator as a rule a kernel writer can follow, for the model's prompts.

The generator prompt states these rules, rendered from this table, so that a model does not
spend iterations on rejections it was never told about. The table is keyed by the gate names
of okgit.eval.parent.verdict.GATES (a test fails when a gate has no rule here), and the static rule
lists the forbidden imports and calls from okgit.eval.parent.static itself, so the two cannot drift.
"""

from __future__ import annotations

from okgit.eval.parent.static import FORBIDDEN_CALLS, FORBIDDEN_MODULES
from okgit.eval.protocol.jobs import INIT_FLOAT_FACTOR

GATE_RULES: dict[str, str] = {
    "static": ("No import of {modules}; no call of {calls}; no tensor subclasses, dispatch modes or "
               "torch-function overrides; nothing that reaches the evaluator's frames, files or signals."),
    "compile": "The file must import and build (Triton JIT, load_inline) without error.",
    "device": "It must run on the device the reference runs on; no device selection of its own.",
    "entry_points": ("Do not replace or patch what the evaluator relies on (torch functions, timers, "
                     "comparison functions, the reference's names)."),
    "output_type": "Return exactly the reference's structure: same number of outputs, shapes, dtypes and device, plain tensors.",
    "aliasing": "An output must not alias an input (no returning an input or a view of one) unless the reference's does.",
    "inputs_unchanged": "Never write to the inputs: the inputs must be unchanged after the call.",
    "outputs_written": "Write every element of every output (masked stores must still cover the whole tensor).",
    "nan_pattern": "NaN and inf must appear exactly where the reference has them.",
    "seeds": ("Correct within the tolerance on inputs drawn under several random seeds. A float32 "
              "matmul or convolution must be as accurate as the fp32 reference (within 4x its own error "
              "against float64): single-pass TF32 or bf16 products fail, tl.dot(..., input_precision=\"tf32x3\") "
              "does not."),
    "repeat": "A second call on the same inputs must be correct too (no state carried between calls).",
    "determinism": "Bitwise deterministic: two calls on identical inputs give identical bits (no atomics whose order changes the result).",
    "fresh_inputs": "Correct when the same input buffers are refilled with new values: cache nothing keyed on an input's address.",
    "remembered": ("Compute every output in the call that returns it: never return a tensor an earlier call "
                   "returned (no cache of outputs keyed on input contents, hashes, addresses or call counts)."),
    "distribution": "Correct on a second input distribution (x -> 3x - 1): no assumption about the sign or range of values.",
    "extra_shapes": "Correct at the extra sizes checked (see the shapes below): no size hard-coded from the defaults; masks handle any size.",
    "init_inputs": f"Correct when every float constructor argument is scaled by {INIT_FLOAT_FACTOR:g}: no constants baked in from them.",
    "train_mode": ("Where the reference depends on its mode (batch norm, dropout, self.training): correct in "
                   "training mode, reading self.training at run time rather than a mode fixed in the kernel."),
    "state": ("Leave the module's buffers and parameters as the reference leaves them after the same calls "
              "(running statistics and num_batches_tracked updated in training mode only)."),
    "eval_mode": "Correct after model.eval() too: eval mode uses the running statistics, and dropout is off.",
    "backend_kernel": "The main work runs in your own kernels of the backend; a file that only calls PyTorch ops is rejected.",
    "own_shape": "Your kernels must run at every shape the op takes, the op file's own included: no fallback to the original code at shapes you did not compile for.",
    "streams": "Work on other streams is allowed only if the caller's stream waits for it before the call returns (wait_stream / events): outputs must be complete in the caller's stream order.",
    "timed_outputs": "Outputs of the timed calls must be as correct as the checked ones.",
    "roofline": "A time below the roofline floor (less work than the op needs) is rejected as implausible.",
}


def rules_text() -> str:
    """The rules as prompt lines, one per gate, in the evaluator's order."""
    modules = ", ".join(sorted(FORBIDDEN_MODULES))
    calls = ", ".join(f"{c}()" for c in sorted(FORBIDDEN_CALLS))
    return "\n".join(f"- [{gate}] {rule.format(modules=modules, calls=calls)}" for gate, rule in GATE_RULES.items())
