"""The bundled kernel catalog loaded in a forked child beside the rules
(``catalog.PendingCatalog``): the same catalog as loaded in process, loaded here when the
child fails, and ``--kernels`` folders loaded at once (their errors first)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ruleengine import procs
from ruleengine.kernels import catalog
from ruleengine.kernels.catalog import CatalogError, PendingCatalog, load_catalog

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


@pytest.fixture
def unloaded(monkeypatch):
    """No bundled catalog loaded yet in this process; the functions forked."""
    monkeypatch.setattr(catalog, "_BUNDLED", None)
    begun: list[object] = []
    real = procs.Forked.__init__

    def counted(self, fn, *args):
        begun.append(fn)
        real(self, fn, *args)

    monkeypatch.setattr(procs.Forked, "__init__", counted)
    return begun


def test_the_forked_catalog_is_the_one_loaded_here(unloaded):
    pending = PendingCatalog((), jobs=2)
    assert unloaded == [catalog._pickled_bundled]
    got = pending.result()
    assert got == load_catalog()
    assert PendingCatalog((), jobs=2).result() is got  # kept: no second child
    assert len(unloaded) == 1


def test_a_failed_child_leaves_the_load_to_this_process(unloaded, monkeypatch):
    pending = PendingCatalog((), jobs=2)

    def gone() -> bytes:
        raise ChildProcessError("the forked worker ended without a result")

    monkeypatch.setattr(pending._child, "result", gone)
    assert pending.result() == load_catalog()


def test_one_job_or_kernel_folders_load_in_process(unloaded, tmp_path: Path):
    assert PendingCatalog((), jobs=1).result() == load_catalog()
    (tmp_path / "Bad.yaml").write_text("kernel: [not, a, name]\n")
    with pytest.raises(CatalogError):  # at once, before any result is asked for
        PendingCatalog((tmp_path,), jobs=2)
    assert unloaded == []
