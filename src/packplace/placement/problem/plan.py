"""A placement plan: per vertex a parallel strategy, a micro-batch size and a block of GPUs.

All types are frozen and hashable so that a search can cache evaluations by plan. A
:class:`Plan` is canonical: its vertices are sorted by name, so two plans with the same content are
equal and hash the same whatever order they were built in.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from packplace.errors import ConfigError
from packplace.placement.problem.hardware import Cluster


@dataclass(frozen=True, slots=True, order=True)
class Strategy:
    """Data × pipeline × tensor parallel degrees; ``dp·pp·tp`` is the block's GPU count. ``ep`` (default
    1) is the expert-parallel degree of a MoE model: groups of ``ep`` of the ``dp`` data-parallel replicas
    split the routed experts among them (Megatron-Core's expert parallelism; vLLM's expert-parallel
    mode), so it divides ``dp`` and adds no GPUs."""

    dp: int
    pp: int
    tp: int
    ep: int = 1

    @property
    def gpus(self) -> int:
        """``dp · pp · tp``."""
        return self.dp * self.pp * self.tp


@dataclass(frozen=True, slots=True, order=True)
class Allocation:
    """A block of the device grid: a contiguous range of linear GPU ids.

    Attributes:
        origin: ``(rack, node, gpu)`` of the first GPU.
        extent: ``(r_ext, n_ext, g_ext)``. Legal shapes: part of one node
            ``(1, 1, g_ext)`` with ``g_ext`` dividing ``G`` and ``gpu % g_ext == 0`` (aligned), or, on a node
            of several hosts (``gpus_per_host < G``: an NVL72 domain of 4-GPU trays), whole hosts (``g_ext``
            and ``gpu`` multiples of the host's GPUs: 16 of 18 trays); whole nodes
            of one rack ``(1, n_ext, G)`` from a node it fits in (``node + n_ext ≤ N``); whole racks
            ``(r_ext, N, G)`` from a rack they fit in. The counts need not divide the rack or the
            cluster, so a rack's nodes split 2:1 or 3:1; the search proposes the counts and positions
            of :func:`packplace.placement.candidates.block_origins`, and the evaluator scores any legal
            block.
    """

    origin: tuple[int, int, int]
    extent: tuple[int, int, int]

    @property
    def num_gpus(self) -> int:
        """``r_ext · n_ext · g_ext``."""
        return self.extent[0] * self.extent[1] * self.extent[2]

    def gpu_range(self, cluster: Cluster) -> tuple[int, int]:
        """Linear id range ``[lo, hi)`` (every legal block is contiguous in linear ids)."""
        lo = cluster.gpu_id(*self.origin)
        return lo, lo + self.num_gpus

    def gpu_ids(self, cluster: Cluster) -> list[tuple[int, int, int]]:
        """Explicit ``(rack, node, gpu)`` ids of the block, in linear order."""
        lo, hi = self.gpu_range(cluster)
        return [cluster.coords(gid) for gid in range(lo, hi)]

    def check(self, cluster: Cluster) -> str | None:
        """Why the block is not a legal shape on ``cluster`` (one line), or ``None`` if legal."""
        (r, n, g), (re_, ne, ge) = self.origin, self.extent
        R, N, G = cluster.racks, cluster.nodes_per_rack, cluster.gpus_per_node
        if min(re_, ne, ge) < 1 or min(r, n, g) < 0:
            return f"block {self.origin}+{self.extent}: negative origin or empty extent"
        if re_ == 1 and ne == 1:
            H = cluster.host_gpus
            ok = (G % ge == 0 and g % ge == 0) or (H < G and ge % H == 0 and g % H == 0)
            shape = f"part of a node needs g_ext dividing {G} and gpu % g_ext == 0"
            if H < G:
                shape += f", or whole hosts of {H} GPUs (g_ext and gpu multiples of {H})"
        elif re_ == 1:
            ok = ge == G and g == 0
            shape = f"a multi-node block needs whole nodes (g_ext={G}, origin gpu 0)"
        else:
            ok = ge == G and ne == N and g == 0 and n == 0
            shape = f"a multi-rack block needs whole racks (n_ext={N}, g_ext={G}, origin node 0 and gpu 0)"
        if not ok:
            return f"block {self.origin}+{self.extent} is not a legal shape: {shape}"
        if r + re_ > R or n + ne > N or g + ge > G:
            return f"block {self.origin}+{self.extent} exceeds the {R}x{N}x{G} cluster"
        return None


@dataclass(frozen=True, slots=True)
class VertexPlan:
    """One vertex's choice: strategy, micro-batch (sequences per micro-batch; for generation, sequences
    decoded together per replica) and block."""

    strategy: Strategy
    micro_batch: int
    allocation: Allocation


@dataclass(frozen=True)
class Plan:
    """A full plan: ``vertices`` is ``((name, VertexPlan), ...)`` sorted by name; ``staleness`` is
    ``((model, t), ...)`` sorted (default: empty = 0 for every model; the asynchronous objective)."""

    vertices: tuple[tuple[str, VertexPlan], ...]
    staleness: tuple[tuple[str, int], ...] = ()

    @classmethod
    def build(cls, mapping: Mapping[str, VertexPlan] | Iterable[tuple[str, VertexPlan]],
              staleness: Mapping[str, int] | None = None) -> Plan:
        """Canonical plan from ``{vertex: VertexPlan}`` and optional ``{model: staleness}``
        (zero staleness entries are dropped, so the default is the empty tuple)."""
        items = mapping.items() if isinstance(mapping, Mapping) else mapping
        stale = tuple(sorted((m, int(t)) for m, t in (staleness or {}).items() if t))
        return cls(tuple(sorted(items, key=lambda kv: kv[0])), stale)

    def by_vertex(self) -> dict[str, VertexPlan]:
        """``{vertex: VertexPlan}``."""
        return dict(self.vertices)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: per vertex strategy, micro-batch and block, and the staleness per model.

        The cluster-free form of :func:`plan_to_json` (no explicit GPU ids); :meth:`from_dict` inverts both.
        """
        return {
            "vertices": {name: _vertex_dict(vp) for name, vp in self.vertices},
            "staleness": dict(self.staleness),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Plan:
        """The plan :meth:`to_dict` or :func:`plan_to_json` wrote (see :func:`plan_from_json`).

        Raises:
            ConfigError: missing or malformed fields.
        """
        return plan_from_json(data)

    def __getitem__(self, name: str) -> VertexPlan:
        for key, value in self.vertices:
            if key == name:
                return value
        raise KeyError(name)

    def replace(self, name: str, vertex_plan: VertexPlan) -> Plan:
        """A copy with vertex ``name`` set to ``vertex_plan``."""
        return Plan(tuple((k, vertex_plan if k == name else v) for k, v in self.vertices), self.staleness)

    def staleness_of(self, model: str) -> int:
        """Staleness of ``model`` (0 if unset)."""
        return dict(self.staleness).get(model, 0)

    def with_staleness(self, model: str, value: int) -> Plan:
        """A copy with ``model``'s staleness set."""
        stale = dict(self.staleness)
        stale[model] = value
        return Plan.build(self.vertices, stale)


def gpu_ranges(gpu_ids: list[tuple[int, int, int]]) -> str:
    """Compact ``rack/node/gpu`` ranges, e.g. ``r0/n0-1/g0-7`` for two whole nodes."""
    racks = sorted({r for r, _, _ in gpu_ids})
    nodes = sorted({n for _, n, _ in gpu_ids})
    gpus = sorted({g for _, _, g in gpu_ids})

    def span(xs: list[int]) -> str:
        return str(xs[0]) if len(xs) == 1 else f"{xs[0]}-{xs[-1]}"

    return f"r{span(racks)}/n{span(nodes)}/g{span(gpus)}"


def _vertex_dict(vp: VertexPlan) -> dict[str, Any]:
    return {
        "strategy": {"dp": vp.strategy.dp, "pp": vp.strategy.pp, "tp": vp.strategy.tp, "ep": vp.strategy.ep},
        "micro_batch": vp.micro_batch,
        "allocation": {"origin": list(vp.allocation.origin), "extent": list(vp.allocation.extent)},
    }


def plan_to_json(plan: Plan, cluster: Cluster) -> dict[str, Any]:
    """JSON-ready dict: :meth:`Plan.to_dict` plus each vertex's explicit GPU ids ``[rack, node, gpu]``."""
    out = plan.to_dict()
    for name, vp in plan.vertices:
        out["vertices"][name]["gpus"] = [list(ids) for ids in vp.allocation.gpu_ids(cluster)]
    return out


def _whole(value: Any, field: str) -> int:
    """``value`` as an int: any integral number but a boolean (an int, a numpy integer: ``operator.index``), or a
    real number with an integral value (JSON's ``16.0``, ``np.float64(16.0)``); a string, a boolean or a fraction
    is refused (``int()`` had read ``dp: 16.9`` as 16, staleness ``1.7`` as 1 and ``"2"`` as 2, and the
    evaluator scored the plan so read).

    Raises:
        ConfigError: ``plan: <field>: must be an integer, got <value>``.
    """
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return operator.index(value)
    if (isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
            and float(value).is_integer()):
        return int(float(value))
    raise ConfigError(f"plan: {field}: must be an integer, got {value!r}")


def _triple(values: Any, field: str = "block") -> tuple[int, int, int]:
    a, b, c = (_whole(x, f"{field}[{i}]") for i, x in enumerate(values))
    return a, b, c


def plan_from_json(data: Mapping[str, Any]) -> Plan:
    """Inverse of :func:`plan_to_json` (the ``gpus`` lists are implied by the blocks and ignored).

    Raises:
        ConfigError: missing or malformed fields.
    """
    try:
        vertices = {}
        for name, entry in data["vertices"].items():
            s = entry["strategy"]
            alloc = entry["allocation"]
            dp, pp, tp, ep = (_whole(s[k], f"{name}.strategy.{k}") if k in s or k != "ep" else 1
                              for k in ("dp", "pp", "tp", "ep"))
            vertices[name] = VertexPlan(
                Strategy(dp, pp, tp, ep), _whole(entry["micro_batch"], f"{name}.micro_batch"),
                Allocation(_triple(alloc["origin"], f"{name}.allocation.origin"),
                           _triple(alloc["extent"], f"{name}.allocation.extent")),
            )
        stale = {m: _whole(t, f"staleness.{m}") for m, t in (data.get("staleness") or {}).items()}
        return Plan.build(vertices, stale)
    except ConfigError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"plan: malformed plan JSON ({type(exc).__name__}: {exc})") from None
