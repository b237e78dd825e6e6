"""Control-flow bodies as scopes on the real Silero export whose network is inside an If
(issue 36): both branches get their groups and the outputs do not change."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from ruleengine.graph.binding import bind_input_shapes
from ruleengine.graph.loader import read_model
from ruleengine.graph.scopes import rewrite_bodies
from tests.graph.test_scopes import Decide

REAL = Path(__file__).resolve().parents[2] / ".." / "shared" / "models" / "real"
SILERO = REAL / "silero-vad-op18-ifless.onnx"
FEEDS = {  # the README's shapes; sr must be 16000 or 8000
    "input": np.random.RandomState(0).randn(1, 512).astype(np.float32),
    "state": np.random.RandomState(1).randn(2, 1, 128).astype(np.float32),
    "sr": np.array(16000, np.int64),
}


def test_silero_if_branches_get_groups_and_outputs_agree() -> None:
    original = read_model(SILERO)
    bound = read_model(SILERO)
    bind_input_shapes(bound, {"input": (1, 512), "state": (2, 1, 128)}, str(SILERO))
    fused = onnx.ModelProto.FromString(original.SerializeToString())
    decide = Decide()
    rewrite_bodies(fused, bound, decide)  # the fused model keeps the declared shapes
    counts = {"/".join(p): len(g) for p, g in decide.groups.items()}
    assert counts == {"node_cond__1/then_branch": 9, "node_cond__1/else_branch": 9}
    onnx.checker.check_model(fused)
    before = ort.InferenceSession(original.SerializeToString()).run(None, FEEDS)
    after = ort.InferenceSession(fused.SerializeToString()).run(None, FEEDS)
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)
