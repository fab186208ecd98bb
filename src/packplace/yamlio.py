"""YAML loading shared by every config: safe, and with bare scientific notation as floats.

PyYAML implements YAML 1.1, whose float pattern needs a dot and a signed exponent, so ``989e12``
loads as the *string* "989e12". :func:`load_yaml` adds a resolver that reads such numbers as floats.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from packplace.errors import ConfigError

_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)
    |[-+]?(?:[0-9][0-9_]*)\.[0-9_]*
    |[-+]?\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)


class _Loader(yaml.SafeLoader):
    """SafeLoader with the relaxed float resolver; a key given twice in one mapping is an error."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # unhashable key: let PyYAML report it
                break
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (line {key_node.start_mark.line + 1})", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


def loads_yaml(text: str, source: str = "<string>") -> Any:
    """Parse YAML text (see module docstring). Raises ConfigError on a syntax error."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        lines = [line for line in str(exc).splitlines() if line.strip()]
        detail = next((line for line in lines if "duplicate key" in line), lines[0] if lines else "")
        raise ConfigError(f"{source}: invalid YAML: {detail.strip()}") from None


def load_yaml(path: str | Path) -> Any:
    """Read and parse a YAML file. Raises ConfigError if it is missing or not valid YAML."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"config: cannot read {str(path)!r}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config: {str(path)!r} is not UTF-8 text") from None
    return loads_yaml(text, str(path))
