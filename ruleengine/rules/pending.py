"""The rule set loaded in a forked child while the caller reads the model.

Loading the bundled rules (YAML with positions, JSON Schema, lint) is ~0.45 s of CPU
that needs nothing of the model, and reading a large model is seconds of CPU that needs
nothing of the rules: with a second core the two overlap.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Sequence
from pathlib import Path

from ruleengine.rules.model import RuleSet

# A model file at least this large takes the parent longer to read than the rules take
# the child (a 2048-layer stack's file is 7.5-29 MB); below it (small models: the
# suggest loop analyses them hundreds of times) the fork and the pickling would be CPU
# spent for little or no wall time, so the rules load here first as ever.
FORK_FROM_BYTES = 4 << 20

# The processes a large model's reading already keeps busy: this one and ONNX's shape
# inference in its forked child (``graph.propagate.PendingShapes``), then the matcher's
# two. A rules child only gains wall time on a core beyond those: measured on 2 cores
# (docs/speed.md, "The rules' fork"), forking them saved no wall time at 512 or 2048
# layers (within +-0.2 s of 5.3 / 11.4 s) and cost 0.06-0.35 s of CPU (the child's
# fork, pickling and exit, and the caches the parent no longer has warm).
FORK_FROM_JOBS = 3


def rules_jobs(model: str | Path, jobs: int) -> int:
    """The ``jobs`` for ``PendingRules`` beside reading ``model``: 1 (load them here)
    unless a core is left beside the model's reading (``FORK_FROM_JOBS``) and the file
    is large (a small file, or one whose size cannot be read: its error comes when it
    is read)."""
    if jobs < FORK_FROM_JOBS:
        return 1
    try:
        big = Path(model).stat().st_size >= FORK_FROM_BYTES
    except (OSError, TypeError, ValueError):
        big = False
    return jobs if big else 1


class PendingRules:
    """``load_rule_set(rules, preset)`` begun. With ``jobs`` > 1 a forked child
    (``procs.Forked``) loads the rule files (YAML, JSON Schema, lint: ~0.45 s CPU
    for the bundled ones) while this process reads the model, and sends the rule set back
    pickled (~25 ms both ways); ``seconds`` are the child's wall and CPU seconds. Without
    a child, or when the child fails in any way (a bad rule file too), the rules load
    here on ``result``, so their errors are raised as ever."""

    def __init__(self, rules: Sequence[str | Path], preset: str | None, jobs: int) -> None:
        from ruleengine.procs import Forked, forkable

        self._rules, self._preset = tuple(rules), preset
        self._child = Forked(_pickled_rules, self._rules, preset) if forkable(jobs) else None
        self.forked = self._child is not None
        self.seconds = (0.0, 0.0)

    def result(self) -> RuleSet:
        from ruleengine.rules import load_rule_set

        child, self._child = self._child, None
        if child is not None:
            try:
                rule_set, self.seconds = pickle.loads(child.result())
                return rule_set
            except Exception:  # any fault of the child: loaded here
                pass
        return load_rule_set(self._rules, preset=self._preset)


def _pickled_rules(rules: tuple[str | Path, ...], preset: str | None) -> bytes:
    """The forked child's work: the rule set and the seconds it took, pickled."""
    from ruleengine.rules import load_rule_set

    wall, cpu = time.perf_counter(), time.process_time()
    rule_set = load_rule_set(rules, preset=preset)
    seconds = (time.perf_counter() - wall, time.process_time() - cpu)
    return pickle.dumps((rule_set, seconds), protocol=pickle.HIGHEST_PROTOCOL)
