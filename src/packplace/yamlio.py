"""YAML loading shared by every config: safe, bounded, and with bare scientific notation as floats.

PyYAML implements YAML 1.1, whose float pattern needs a dot and a signed exponent, so ``989e12``
loads as the *string* "989e12". :func:`load_yaml` adds a resolver that reads such numbers as floats.

Parsing uses libyaml's ``CSafeLoader`` where PyYAML was built with it (the pure-Python ``SafeLoader``
otherwise); the document is composed into nodes, the limits below are checked on the nodes, and only
then are values constructed.

Limits (a config is a small human-written file; these stop a tiny or huge file from exhausting the
machine before any field is checked):

* :data:`MAX_CONFIG_BYTES`: the file size, checked before reading.
* :data:`MAX_DEPTH`: nesting of mappings and sequences (deeper files would overflow Python's stack).
* :data:`MAX_EXPANDED_NODES`: the number of nodes once every alias is expanded. Aliases (``*name``)
  are accepted, but a file whose aliases multiply into more nodes than this ("billion laughs") is
  refused in time linear in its *unexpanded* size; an alias that refers to its own ancestor (a cyclic
  document) is refused as well.
* :data:`MAX_INT_DIGITS`: digits of an integer (Python refuses longer conversions).

A key given twice in one mapping is an error; merge keys (``<<: *defaults``) are accepted and the
mapping's own keys override merged ones.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from packplace.errors import ConfigError, show
from packplace.outputs import record_input

#: Largest config file read, in bytes (1M token counts in a flow list take about 8 MB).
MAX_CONFIG_BYTES = 64 * 2**20
#: Deepest nesting of mappings/sequences in a config.
MAX_DEPTH = 64
#: Most YAML nodes a config may hold after alias expansion.
MAX_EXPANDED_NODES = 20_000_000

_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)
    |[-+]?(?:[0-9][0-9_]*)\.[0-9_]*
    |[-+]?\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)

_MERGE_TAG = "tag:yaml.org,2002:merge"


def _check_graph(root: yaml.Node) -> int:
    """Nodes under ``root`` with every alias expanded, without expanding them (memoised on node identity);
    also checks the nesting depth (iterative: a deep document never recurses in Python).

    Raises:
        ConfigError: nested more than :data:`MAX_DEPTH` levels, the expansion exceeds
            :data:`MAX_EXPANDED_NODES`, or a node contains itself.
    """
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    # iterative post-order walk: (node, depth, children visited?)
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        key = id(node)
        if isinstance(node, yaml.ScalarNode):
            sizes[key] = 1
            continue
        if depth > MAX_DEPTH:
            line = node.start_mark.line + 1
            raise ConfigError(f"invalid YAML: nested more than {MAX_DEPTH} levels deep (line {line})")
        children: list[yaml.Node] = (
            [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else list(node.value)
        )
        if done:
            on_path.discard(key)
            total = 1 + sum(sizes[id(child)] for child in children)
            if total > MAX_EXPANDED_NODES:
                raise ConfigError(
                    f"invalid YAML: aliases expand to more than {MAX_EXPANDED_NODES:,} nodes "
                    f"(line {node.start_mark.line + 1})"
                )
            sizes[key] = total
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise ConfigError(f"invalid YAML: an alias refers to its own ancestor (line {node.start_mark.line + 1})")
        on_path.add(key)
        stack.append((node, depth, True))
        for child in children:
            child_key = id(child)
            if child_key in on_path:
                raise ConfigError(
                    f"invalid YAML: an alias refers to its own ancestor (line {child.start_mark.line + 1})"
                )
            if child_key not in sizes:
                stack.append((child, depth + 1, False))
    return sizes[id(root)]


#: libyaml's parser where PyYAML was built with it (several times faster), else the pure-Python one.
_BASE_LOADER: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
#: Most digits of a YAML integer (Python's own limit on converting text to int).
MAX_INT_DIGITS = 4300


class _Loader(_BASE_LOADER):  # type: ignore[misc,valid-type]
    """Safe loading with the relaxed float resolver, a nesting limit, an alias-expansion limit, an integer
    length limit and an error for a key given twice in one mapping. The document is composed into nodes
    (libyaml where present), checked (:func:`_check_graph`), then constructed."""

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        _check_graph(node)
        return self.construct_document(node)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        digits = sum(ch.isdigit() or ch in "abcdefABCDEF" for ch in str(node.value))
        if digits > MAX_INT_DIGITS:
            raise ConfigError(f"invalid YAML: an integer of {digits:,} digits (line {node.start_mark.line + 1}); "
                              f"the limit is {MAX_INT_DIGITS:,}")
        return super().construct_yaml_int(node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # unhashable key: let PyYAML report it
                break
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {show(key)} (line {key_node.start_mark.line + 1})", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


#: Fewest items of a sequence of plain integers that :func:`_lift_int_sequences` reads itself.
MIN_LIFTED_ITEMS = 1000
_INT = r"(?:0|[1-9][0-9]{0,17})"
#: ``key: [1, 2, 3]`` on one or more lines: a flow sequence of plain decimal integers after a key on a line
#: without quotes, comments or other brackets.
_FLOW_INTS = re.compile(r"(?m)^([^\n#'\"\[\]{}&*!|>]*?:[ \t]+)\[([0-9,\s]*)\][ \t]*$")
#: An item that YAML 1.1 would not read as a plain decimal integer of at most 18 digits: a leading zero
#: (octal), 19 digits or more, or whitespace inside an item.
_NOT_PLAIN = re.compile(r"(?<![0-9])0[0-9]|[0-9]{19}|[0-9]\s+[0-9]")
#: ``key:`` then ``- 1`` lines at one indentation: a block sequence of plain decimal integers.
_BLOCK_INTS = re.compile(rf"(?m)^([ ]*)([^\n#'\"\[\]{{}}&*!|> -][^\n#'\"\[\]{{}}&*!|>]*?:)[ \t]*\n"
                         rf"(?P<ind>[ ]*)- {_INT}[ \t]*\n(?:(?P=ind)- {_INT}[ \t]*\n)*")


def _lift_int_sequences(text: str) -> tuple[str, dict[str, list[int]]]:
    """``text`` with every long sequence of plain decimal integers (at least :data:`MIN_LIFTED_ITEMS`, as
    a flow ``key: [1, 2, ...]`` or a block of ``- 1`` lines under ``key:``) replaced by a placeholder
    scalar, and the placeholder -> its integers (a Python list, what the YAML parser would build).

    A million token counts parse in a fraction of a second this way instead of composing a million YAML
    nodes. Only the unambiguous forms are lifted (digits without sign, leading zero, underscore or
    exponent, so that YAML 1.1's octal and sexagesimal readings never apply); anything else stays for the
    parser. :func:`loads_yaml` checks that each placeholder came back as a whole value and nowhere else
    (else it parses the original text).
    """
    if len(text) < 4 * MIN_LIFTED_ITEMS:
        return text, {}
    lifted: dict[str, list[int]] = {}
    tag = f"packplace-lifted-{os.getpid()}-{len(text)}-"
    if tag in text:
        return text, {}

    def flow(match: re.Match[str]) -> str:
        body = match.group(2)
        commas = body.count(",")
        if commas + 1 < MIN_LIFTED_ITEMS or _NOT_PLAIN.search(body):
            return match.group(0)
        values = list(map(int, body.replace(",", " ").split()))
        # one item between every two commas (an empty item is YAML's business), a trailing comma allowed
        if len(values) != commas + 1 and not (len(values) == commas and body.rstrip().endswith(",")):
            return match.group(0)
        name = f"{tag}{len(lifted)}"
        lifted[name] = values
        return f"{match.group(1)}{name}"

    def block(match: re.Match[str]) -> str:
        indent, key, items = match.group(1), match.group(2), match.group(0).split("\n", 1)[1]
        if len(match.group("ind")) < len(indent) or items.count("\n") < MIN_LIFTED_ITEMS:
            return match.group(0)
        name = f"{tag}{len(lifted)}"
        lifted[name] = [int(line.split("-", 1)[1]) for line in items.splitlines()]
        return f"{indent}{key} {name}\n"

    text = _FLOW_INTS.sub(flow, text)
    if "\n- " in text or "\n  - " in text or re.search(r"\n[ ]*- [0-9]", text):
        text = _BLOCK_INTS.sub(block, text if text.endswith("\n") else text + "\n")
    return text, lifted


def _restore_lifted(data: Any, lifted: dict[str, list[int]]) -> tuple[Any, int, int]:
    """``data`` with each placeholder value replaced by its integers; the number of values replaced and of
    strings (values or keys) that hold a placeholder inside longer text (the lifting then changed text
    and the original is parsed instead)."""
    if isinstance(data, str):
        if data in lifted:
            return lifted[data], 1, 0
        return data, 0, int(any(name in data for name in lifted))
    replaced = inside = 0
    if isinstance(data, list):
        out = []
        for item in data:
            value, r, i = _restore_lifted(item, lifted)
            out.append(value)
            replaced, inside = replaced + r, inside + i
        return out, replaced, inside
    if isinstance(data, dict):
        restored = {}
        for key, item in data.items():
            value, r, i = _restore_lifted(item, lifted)
            restored[key] = value
            replaced += r
            inside += i + (isinstance(key, str) and any(name in key for name in lifted))
        return restored, replaced, inside
    return data, 0, 0


def loads_yaml(text: str, source: str = "<string>") -> Any:
    """Parse YAML text (see module docstring).

    Long sequences of plain integers (token counts) are read without the YAML parser
    (:func:`_lift_int_sequences`); the result is the same.

    Raises:
        ConfigError: a syntax error, a duplicate key, or a limit of the module docstring exceeded; the
            message is one line starting with ``source``.
    """
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{source}: config is {len(text):,} characters; the limit is {MAX_CONFIG_BYTES:,}")
    short, lifted = _lift_int_sequences(text)
    if lifted:
        try:
            data, replaced, inside = _restore_lifted(_parse(short, source), lifted)
        except ConfigError:  # the original text is parsed for its own error message
            replaced = inside = -1
        if replaced == len(lifted) and inside == 0:
            return data
    return _parse(text, source)


def _parse(text: str, source: str) -> Any:
    """:func:`loads_yaml` without the lifting of integer sequences."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{source}: invalid YAML: nested too deeply") from None
    except ValueError as exc:  # a conversion Python refuses (e.g. an integer too long for int())
        raise ConfigError(f"{source}: invalid YAML: {str(exc)[:80]}") from None
    except (TypeError, AttributeError, IndexError, KeyError) as exc:  # an explicit tag on a value it cannot take
        raise ConfigError(f"{source}: invalid YAML: a value that does not fit its tag (e.g. !!set on a list, "
                          f"!!timestamp on a word): {type(exc).__name__}: {str(exc)[:80]}") from None
    except yaml.YAMLError as exc:
        if "maximum nesting depth" in str(exc):  # libyaml's own nesting limit, far above MAX_DEPTH
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark is not None else ""
            raise ConfigError(f"{source}: invalid YAML: nested more than {MAX_DEPTH} levels deep{where}") from None
        raise ConfigError(f"{source}: invalid YAML: {_yaml_error_detail(exc)}") from None


def _yaml_error_detail(exc: yaml.YAMLError) -> str:
    """One line for a PyYAML error, with where it is: what the parser was inside and where that began, then the
    problem at its line and column (a :class:`yaml.MarkedYAMLError`'s ``context``/``context_mark`` and
    ``problem``/``problem_mark``, 0-based marks printed 1-based, as PyYAML's own text prints them), e.g.
    ``while parsing a block mapping (line 1, column 1): did not find expected key (line 4, column 2)``. A
    duplicate key (this module's constructor) names its own line. Other errors: their first non-empty line.
    At most 200 characters (then ``...``)."""
    def at(text: str | None, mark) -> str:
        return f"{text} (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else str(text)

    problem, context = getattr(exc, "problem", None), getattr(exc, "context", None)
    if problem and "duplicate key" in problem:
        detail = problem
    elif problem:
        detail = at(problem, getattr(exc, "problem_mark", None))
        if context:
            detail = at(context, getattr(exc, "context_mark", None)) + ": " + detail
    else:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        detail = lines[0] if lines else type(exc).__name__
    return detail[:200] + "..." if len(detail) > 200 else detail


def read_regular_text(path: str | Path, what: str = "config", limit: int | None = None) -> str:
    """The UTF-8 text of ``path``, which must be a regular file (a FIFO, a device or a folder is refused at
    once, never read or waited on) of at most ``limit`` bytes; recorded as an input of the command
    (:func:`packplace.outputs.record_input`).

    Raises:
        ConfigError: ``<what>: ...`` naming the path: missing, unreadable, not a regular file, larger than
            ``limit``, or not UTF-8.
    """
    name = str(path)
    limit = MAX_CONFIG_BYTES if limit is None else limit
    try:
        # O_NONBLOCK: opening a FIFO without a writer returns at once (it is refused below)
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise ConfigError(f"{what}: cannot read {name!r}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{what}: {name!r} is not a regular file")
        if info.st_size > limit:
            raise ConfigError(f"{what}: {name!r} is {info.st_size:,} bytes; the limit is {limit:,}")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise ConfigError(f"{what}: cannot read {name!r}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ConfigError(f"{what}: {name!r} is more than {limit:,} bytes; the limit is {limit:,}")
    record_input(name)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{what}: {name!r} is not UTF-8 text") from None


def load_yaml(path: str | Path) -> Any:
    """Read and parse a YAML file (size checked before reading).

    Raises:
        ConfigError: missing, unreadable, not a regular file, larger than :data:`MAX_CONFIG_BYTES`, not
            UTF-8, or not valid YAML.
    """
    text = read_regular_text(path)
    return loads_yaml(text, str(path))


def set_dotted(tree: dict, dotted: str, value: Any) -> None:
    """Set ``tree[a][b]...[z] = value`` for ``dotted`` = ``"a.b...z"``, creating the mappings on the way (a config
    override such as ``policy.framework_version``)."""
    node = tree
    keys = dotted.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
