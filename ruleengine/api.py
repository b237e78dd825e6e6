"""The Python API behind ``import ruleengine``: ``AutoFusion`` and the plain functions.

Each mirrors a CLI command and calls ``pipeline`` (keyword options, as the CLI's flags);
heavy modules load on first use, so importing this module is cheap.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ruleengine.cost.model import ScoredCandidate, Target
    from ruleengine.match.model import Candidate
    from ruleengine.pipeline import Analysis, FuseResult
    from ruleengine.rewrite.model import Plan, Verification
    from ruleengine.rules.model import RuleSet


@contextlib.contextmanager
def _model_file(model: Any) -> Iterator[Path]:
    """A path for the model: the given path, or a temporary file for an in-memory ModelProto
    (or its serialized bytes), named after the graph with only safe characters: a graph
    name like ``../../x`` or ``a/b`` must not write outside the temporary directory."""
    if isinstance(model, str | os.PathLike):
        yield Path(model)
        return
    if isinstance(model, bytes | bytearray):
        data, name = bytes(model), "model"
    elif hasattr(model, "SerializeToString") and hasattr(model, "graph"):
        data, name = model.SerializeToString(), getattr(model.graph, "name", "")
    else:
        raise TypeError(
            f"model must be a path, an onnx.ModelProto or its serialized bytes, "
            f"not {type(model).__name__}"
        )
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._")[:100] or "model"
    with tempfile.TemporaryDirectory(prefix="autofusion-") as tmp:
        path = Path(tmp) / f"{stem}.onnx"
        path.write_bytes(data)
        yield path


class AutoFusion:
    """A configured fuser: the CLI's options, reusable across models.

    ``benefit_threshold`` raises every rule's threshold to at least this value;
    ``safe_mode`` verifies the fused model and drops failing groups (found by bisection).
    ``weights`` is the CLI's ``--weights``: "copy" (default), "share" or "link".
    """

    def __init__(
        self,
        rules: Sequence[str | Path] = (),
        *,
        preset: str | None = None,
        target: str | Target = "ascend910b",
        solver: str = "exact",
        benefit_threshold: float | None = None,
        safe_mode: bool = False,
        enable: Sequence[str] = (),
        disable: Sequence[str] = (),
        dims: Mapping[str, int] | None = None,
        seed: int = 0,
        time_limit_s: float = 30.0,
        verify_mode: str = "auto",
        copy_weights: bool = False,
        weights: str = "copy",
        input_shapes: Mapping[str, Sequence[int]] | None = None,
        jobs: int | None = None,
        plan_detail: str = "compact",
        kernels: Sequence[str | Path] = (),
    ) -> None:
        # One path may be given as such: tuple('rules/') would be its characters.
        self.rules = (rules,) if isinstance(rules, str | os.PathLike) else tuple(rules)
        self.preset = preset
        self.target = target
        self.solver = solver
        self.benefit_threshold = benefit_threshold
        self.safe_mode = safe_mode
        self.enable = tuple(enable)
        self.disable = tuple(disable)
        self.dims = dict(dims or {})
        self.seed = seed
        self.time_limit_s = time_limit_s
        self.verify_mode = verify_mode
        self.copy_weights = copy_weights  # kept for callers: the same as weights="copy"
        self.weights = "copy" if copy_weights else weights
        self.input_shapes = {k: tuple(v) for k, v in (input_shapes or {}).items()}
        self.jobs = jobs
        self.plan_detail = plan_detail
        self.kernels = (kernels,) if isinstance(kernels, str | os.PathLike) else tuple(kernels)

    def _options(self) -> dict[str, Any]:
        return {
            "preset": self.preset,
            "target": self.target,
            "solver": self.solver,
            "dims": self.dims,
            "input_shapes": self.input_shapes,
            "jobs": self.jobs,
            "enable": self.enable,
            "disable": self.disable,
            "benefit_threshold": self.benefit_threshold,
            "time_limit_s": self.time_limit_s,
            "kernels": self.kernels,  # the catalog the decision checks candidates against
        }

    def analyze(self, model: Any) -> Analysis:
        """Every decision (match, cost, resolve) without rewriting."""
        from ruleengine.pipeline import analyze

        with _model_file(model) as path:
            return analyze(path, self.rules, **self._options())

    def candidates(self, model: Any) -> tuple[Candidate, ...]:
        """Every subgraph some rule matches (overlapping ones included)."""
        return self.analyze(model).candidates

    def explain(self, model: Any) -> tuple[ScoredCandidate, ...]:
        """Every candidate with its verdict, stable code and reason (fuse, low benefit, ...)."""
        return self.analyze(model).scored

    def fuse(
        self,
        model: Any,
        output_dir: str | Path | None = None,
        *,
        verify: bool | None = None,
        inputs: str | Path | None = None,
    ) -> FuseResult:
        """Fused model, plan and rendered files; written atomically when ``output_dir`` is given."""
        from ruleengine.pipeline import fuse, write_outputs

        with _model_file(model) as path:
            result = fuse(
                path,
                self.rules,
                **self._options(),
                verify=verify,
                safe=self.safe_mode,
                inputs=inputs,
                seed=self.seed,
                verify_mode=self.verify_mode,
                outdir=output_dir,
                weights=self.weights,
                plan_detail=self.plan_detail,
            )
            if output_dir is not None:
                write_outputs(result, output_dir)
        return result

    def plan(self, model: Any) -> Plan:
        """The fusion plan (groups, rejections, per-rule statistics), nothing written."""
        return self.fuse(model, verify=False if not self.safe_mode else None).plan

    def verify(
        self,
        model: Any,
        fused_model: Any | None = None,
        *,
        inputs: str | Path | None = None,
    ) -> Verification:
        """Compare ``model`` with ``fused_model`` (fused here when omitted) in onnxruntime."""
        if fused_model is None:
            fused_model = self.fuse(model, verify=False).fused_model
        return verify(model, fused_model, inputs=inputs, seed=self.seed, dims=self.dims)


Fuser = AutoFusion


def load_rules(paths: Sequence[str | Path] = (), *, preset: str | None = None) -> RuleSet:
    """Load and validate rule files/directories and/or a bundled preset."""
    from ruleengine.rules import load_rule_set

    return load_rule_set(paths, preset=preset)


def load_target(name_or_path: str) -> Target:
    """A bundled target by name (e.g. ``ascend910b``) or a target YAML file."""
    from ruleengine.cost import load_target as _load

    return _load(name_or_path)


def analyze(model: Any, rules: Sequence[str | Path] = (), **options: Any) -> Analysis:
    """Every decision (match, cost, resolve) for a model, nothing rewritten."""
    return AutoFusion(rules, **options).analyze(model)


def candidates(
    model: Any, rules: Sequence[str | Path] = (), **options: Any
) -> tuple[Candidate, ...]:
    """Every subgraph some rule matches (overlapping ones included)."""
    return AutoFusion(rules, **options).candidates(model)


def explain(
    model: Any, rules: Sequence[str | Path] = (), **options: Any
) -> tuple[ScoredCandidate, ...]:
    """Every candidate with its verdict, stable code and reason."""
    return AutoFusion(rules, **options).explain(model)


def fuse(
    model: Any,
    rules: Sequence[str | Path] = (),
    *,
    output_dir: str | Path | None = None,
    verify: bool | None = None,
    inputs: str | Path | None = None,
    **options: Any,
) -> FuseResult:
    """Fuse a model (path or ModelProto); ``result.fused_model`` and ``result.plan``."""
    return AutoFusion(rules, **options).fuse(model, output_dir, verify=verify, inputs=inputs)


def verify(
    original: Any,
    fused: Any,
    *,
    inputs: str | Path | None = None,
    seed: int = 0,
    dims: Mapping[str, int] | None = None,
) -> Verification:
    """Run two models in onnxruntime on the same inputs; cosine and max abs error per output."""
    import onnx

    from ruleengine.verification import numerics as v

    orig = original if isinstance(original, onnx.ModelProto) else onnx.load(str(original))
    new = fused if isinstance(fused, onnx.ModelProto) else onnx.load(str(fused))
    if inputs is not None:
        feeds, source = v.load_inputs(inputs, orig), Path(inputs).name
    else:
        feeds, source = v.make_inputs(orig, seed=seed, dims=dims), f"random (seed {seed})"
    return v.verify(v.run_model(orig, feeds), new, feeds, source)
