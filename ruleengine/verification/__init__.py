"""The verification stage: the fused model against the original, in onnxruntime.

Two modes, chosen from an estimate of onnxruntime's memory (``memory``) or forced:

- ``whole``: original and fused model run on the same inputs; ``--safe`` then finds
  failing groups by an isolation check (each fused node alone, fed the original's values)
  and bisection for what fails only in combination;
- ``per-group``: each fused node alone against the original subgraph it replaces, on
  made-up inputs of the real shapes (``groups``); memory bounded by one group, so a model
  of any size is verified. ``--safe`` drops the groups that fail.

Out of memory is never a crash: a whole-model run the estimate says will not fit is
refused (AF522), and a MemoryError becomes AF523.
"""

from ruleengine.verification.contracts import (
    contract_only_failures,
    mark_verified,
    unbound_warnings,
)
from ruleengine.verification.model import ModeChoice, VerifyOutcome
from ruleengine.verification.modes import MODES, choose_mode, out_of_memory
from ruleengine.verification.run import verify_fused

__all__ = [
    "MODES",
    "ModeChoice",
    "VerifyOutcome",
    "choose_mode",
    "contract_only_failures",
    "mark_verified",
    "out_of_memory",
    "unbound_warnings",
    "verify_fused",
]
