"""The contract verdict: a viable candidate its kernel cannot be written for is no
candidate (``contract_mismatch``), decided before duplicates and the solver.

Checked once per record made and once per twin template (a twin has its source's local
structure, so the same fit); ``kernels.fit.ContractFit`` gives the reason.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ruleengine.cost.lazy import relabel
from ruleengine.cost.model import Verdict
from ruleengine.cost.traffic import group_io
from ruleengine.cost.twin_templates import RecordBook
from ruleengine.graph.model import Graph
from ruleengine.kernels.fit import ContractFit
from ruleengine.kernels.model import Catalog
from ruleengine.rules.model import Rule

CODE = "contract-mismatch"


def mark_misfits(
    graph: Graph, book: RecordBook, rules: Mapping[str, Rule], catalog: Catalog
) -> None:
    """Each viable record (and twin template) whose group fits no form of its kernel
    becomes ``contract_mismatch`` in ``book``, with the reason."""
    fit = ContractFit(graph, catalog)

    def why(i: int) -> str | None:
        c = book.candidates[i]
        return fit.misfit(c, rules.get(c.rule), group_io(graph, c.nodes).outputs)

    for i, rec in list(book.made.items()):
        if rec.verdict is Verdict.FUSE and (reason := why(i)) is not None:
            book.made[i] = relabel(rec, Verdict.CONTRACT_MISMATCH, CODE, reason)
    if not len(book.template):
        return
    ts, first = np.unique(book.template, return_index=True)
    for t, i in zip(ts.tolist(), first.tolist(), strict=True):
        template = book.templates[t] if t >= 0 else None
        if template is None or template[1] is not Verdict.FUSE:
            continue
        reason = why(i)
        if reason is not None:
            priority, _v, _c, cost, _given, redo = template
            book.templates[t] = (priority, Verdict.CONTRACT_MISMATCH, CODE, cost, reason, redo)
