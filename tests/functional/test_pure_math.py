"""posenc.functional is pure math: no module under it reaches posenc.host_reads (the value
checks that read on the host live with the callers that take values from a user: the
encodings, the Triton entries of posenc.rotary.triton_checks). Read with ``ast`` from the
source, imports inside functions included (tests/test_layers.py's import graph)."""

from __future__ import annotations

from tests.test_layers import SRC, import_graph, imports_of, source_modules

HOST_READS = "posenc.host_reads"


def test_no_functional_module_imports_host_reads():
    edges = [e for e in import_graph() if e.importer.startswith("posenc.functional")]
    assert edges, "the import graph found no import of posenc.functional at all"
    reached = [str(e) for e in edges if e.target == HOST_READS]
    assert not reached, "posenc.functional must not read values on the host:\n" + "\n".join(reached)


def test_the_graph_sees_an_import_of_host_reads_in_a_function():
    """The check would catch the import it forbids, written either way."""
    modules = set(source_modules(SRC))
    for source in (
        "from ..host_reads import read\n",
        "def f():\n    from posenc.host_reads import reads_values\n",
        "import posenc.host_reads\n",
    ):
        edges = imports_of("posenc.functional.xpos", source, False, modules)
        assert [e.target for e in edges] == [HOST_READS], source
