"""Real document lengths from a corpus present on every machine: the Python standard library.

Each ``.py`` source file of the running interpreter's standard library (``sysconfig``'s ``stdlib``
path; ``site-packages``, test suites and caches excluded) is one document. Its token count is
**estimated** as ``ceil(bytes / bytes_per_token)`` (default 4 bytes per token, the usual rule of thumb
for BPE tokenizers on English text and code); no tokenizer is run. Empty files are dropped. Documents
longer than ``seq_len`` are split into chunks of at most ``seq_len`` tokens (as pretraining packers
do), keyed ``"path#k"``. The corpus depends on the Python version installed, so the exact lengths
vary between machines; the distribution (median ≈ 2.4k tokens, a long tail past 100k) does not.
"""

from __future__ import annotations

import math
import os
import sysconfig
from dataclasses import dataclass

import numpy as np

from packplace.errors import ConfigError

EXCLUDED_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idlelib", "__pycache__", "lib2to3"})


@dataclass(frozen=True)
class Document:
    """One document (or chunk): ``key`` (relative path, ``#k`` for chunk k) and estimated ``tokens``."""

    key: str
    tokens: int


def stdlib_documents(bytes_per_token: float = 4.0) -> list[Document]:
    """Every non-empty stdlib ``.py`` file as a :class:`Document`, sorted by relative path.

    Raises:
        ConfigError: ``bytes_per_token`` not positive.
    """
    if not (isinstance(bytes_per_token, (int, float)) and bytes_per_token > 0):
        raise ConfigError(f"samples.corpus.bytes_per_token: must be > 0, got {bytes_per_token!r}")
    root = sysconfig.get_paths()["stdlib"]
    found: list[Document] = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d not in EXCLUDED_DIRS)
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                size = os.path.getsize(path)
                if size > 0:
                    rel = os.path.relpath(path, root).replace(os.sep, "/")
                    found.append(Document(rel, math.ceil(size / bytes_per_token)))
    found.sort(key=lambda d: d.key)
    return found


def split_long(documents: list[Document], seq_len: int) -> list[Document]:
    """Split every document longer than ``seq_len`` into chunks of ``seq_len`` tokens (last one shorter)."""
    out: list[Document] = []
    for doc in documents:
        if doc.tokens <= seq_len:
            out.append(doc)
            continue
        full, rest = divmod(doc.tokens, seq_len)
        out.extend(Document(f"{doc.key}#{k}", seq_len) for k in range(full))
        if rest:
            out.append(Document(f"{doc.key}#{full}", rest))
    return out


def sample_batch(documents: list[Document], token_budget: int, seed: int) -> list[Document]:
    """Documents in a seeded random order, taken while their tokens fit ``token_budget``.

    Deterministic for a given document list and seed (numpy ``default_rng``). Documents that would
    overflow the budget are skipped, so the batch fills the budget closely.
    """
    order = np.random.default_rng(seed).permutation(len(documents))
    batch: list[Document] = []
    used = 0
    for i in order:
        doc = documents[int(i)]
        if used + doc.tokens <= token_budget:
            batch.append(doc)
            used += doc.tokens
            if used == token_budget:  # every document has >= 1 token: nothing more fits
                break
    return batch
