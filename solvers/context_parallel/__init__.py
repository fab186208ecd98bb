"""Dynamic context-parallel backends, one module (or subpackage) per algorithm.

:mod:`packplace.registry` imports every module and subpackage of this package whose name does not start
with ``_`` the first time a ``context_parallel`` backend is looked up; each registers itself with
``@register("context_parallel", name)``. Shared helpers live in modules named with a leading ``_``.
"""
