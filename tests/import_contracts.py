"""import-linter contract types of our own (``[tool.importlinter] contract_types``).

grimp's graph records ``import core.authority.domain`` as an import of that module only,
but Python first runs ``core/authority/__init__.py`` (and ``core/__init__.py``).  An eager
package facade therefore drags its re-exports into every submodule import, and a plain
forbidden contract cannot see it.  :class:`RuntimeForbiddenContract` adds the implicit
"a submodule imports its parent package" edge before checking, so the contract measures
what ``import`` really loads.
"""

from __future__ import annotations

from grimp import ImportGraph
from importlinter.contracts.forbidden import ForbiddenContract
from importlinter.domain.contract import ContractCheck


def add_parent_package_imports(graph: ImportGraph) -> None:
    """Record that importing ``a.b.c`` runs ``a.b`` first, for every module in the graph."""
    modules = graph.modules
    for module in sorted(modules):
        parent = module.rpartition(".")[0]
        if parent in modules:
            graph.add_import(
                importer=module,
                imported=parent,
                line_number=0,
                line_contents=f"(importing {module} runs {parent}/__init__.py)",
            )


class RuntimeForbiddenContract(ForbiddenContract):
    """A forbidden contract that also follows the package ``__init__`` each import runs."""

    type_name = "runtime_forbidden"

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        add_parent_package_imports(graph)  # the graph is this contract's own copy
        return super().check(graph, verbose)
