"""Placement backends, one module (or subpackage) per algorithm.

:mod:`packplace.registry` imports every module and subpackage of this package whose name does
not start with ``_`` the first time a placement backend is looked up; each registers itself with
``@register("placement", name)``. Shared helpers live in modules named with a leading ``_``.
"""
