"""The third-party models of ../shared/models/real: their input bindings and the inputs
random ones cannot stand in for, from one table (real_models.json beside this file).

Read by tests/e2e/test_real_models.py and the bench scripts (coverage, same_outputs,
rules_alone): a binding changes in one place. Inputs are written at run time with
numpy (no binary is committed).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
TABLE = HERE / "real_models.json"
REAL = HERE.parent / ".." / "shared" / "models" / "real"


def table() -> dict[str, dict[str, Any]]:
    """model file name -> its entry (input_shapes, inputs, known)."""
    return json.loads(TABLE.read_text(encoding="utf-8"))["models"]


def models() -> list[Path]:
    """The real models present beside the checkout, in the table's order."""
    return [REAL.resolve() / name for name in table() if (REAL / name).exists()]


def input_shapes(model: Path | str) -> dict[str, tuple[int, ...]] | None:
    """The --input-shape bindings of a real model (None: not a real model, or none)."""
    entry = table().get(Path(model).name)
    shapes = (entry or {}).get("input_shapes")
    return {k: tuple(v) for k, v in shapes.items()} if shapes else None


def _dtype(model: Path, name: str) -> np.dtype:
    import onnx

    for vi in onnx.load(str(model), load_external_data=False).graph.input:
        if vi.name == name:
            return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))
    raise KeyError(f"{model.name} has no input {name!r}")


def write_inputs(model: Path | str, folder: Path, seed: int = 0) -> Path | None:
    """An .npz of the model's inputs for ``--inputs`` when the table gives them (None:
    random inputs run the model)."""
    model = Path(model)
    spec = (table().get(model.name) or {}).get("inputs")
    if not spec:
        return None
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for name, how in spec.items():
        if "value" in how:
            feeds[name] = np.asarray(how["value"], dtype=how["dtype"])
        elif "zeros" in how:
            feeds[name] = np.zeros(how["zeros"], dtype=_dtype(model, name))
        else:
            feeds[name] = (rng.standard_normal(how["normal"]) * 0.1).astype(_dtype(model, name))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{model.stem}.inputs.npz"
    np.savez(path, **feeds)
    return path
