"""Balance backends, one module (or subpackage) per algorithm.

:mod:`packplace.registry` imports every module and subpackage of this package whose name does
not start with ``_`` the first time a balance backend is looked up; each registers itself with
``@register("balance", name)``. Shared helpers live in modules named with a leading ``_``.
"""
