"""autofusion: declarative YAML fusion rules for ONNX graphs.

Pipeline: load rules -> load graph -> match -> cost -> resolve -> rewrite/emit.
The Python API mirrors the CLI; heavy modules load lazily, so ``import ruleengine`` is cheap::

    from ruleengine import AutoFusion

    af = AutoFusion(preset="transformer", target="ascend910b", solver="exact")
    result = af.fuse("model.onnx", output_dir="out/")   # writes files; or omit output_dir
    result.fused_model   # onnx.ModelProto with one function-backed node per fused group
    result.plan          # the plan record (plan.json is ``result.files["plan.json"]``)
    af.explain("model.onnx")   # every candidate with its verdict and reason

Plain functions (``fuse``, ``analyze``, ``explain``, ``candidates``, ``verify``,
``load_rules``, ``load_target``) take the same keyword options.
"""

from ruleengine.api import (
    AutoFusion,
    Fuser,
    analyze,
    candidates,
    explain,
    fuse,
    load_rules,
    load_target,
    verify,
)
from ruleengine.version import __version__

__all__ = [
    "AutoFusion",
    "Fuser",
    "__version__",
    "analyze",
    "candidates",
    "explain",
    "fuse",
    "load_rules",
    "load_target",
    "verify",
]
