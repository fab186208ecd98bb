"""The bounds within which ``calibrate`` and the cross-validation fit the efficiency knobs: one table, each
bound with its source, none taken from a validation row.

Every fittable knob has a range (:data:`KNOB_BOUNDS`: a fraction in (0, 1], seconds ≥ 0). The efficiency
fractions (:data:`FRACTION_KNOBS`) also have a **physical upper bound per GPU type** (:data:`GEMM_UPPER`,
:data:`DECODE_UPPER`): the largest fraction of the datasheet peak a microbenchmark of that GPU (or of its
compute die) measured. A fit that asks for more stops there and names the bound's source
(:func:`knob_bound`, :meth:`KnobBound.limit`): such a value says the model lacks a cost on the fitted runs,
not that the GPU runs faster than it was ever measured to.

- ``gemm_peak_fraction`` / ``moe_gemm_peak_fraction``: the best dense BF16 GEMM measured, over the
  datasheet's dense BF16 peak (the presets' ``flops_per_gpu``). A whole pass sustains at most its GEMMs' rate.
- ``decode_bw_eff`` / ``moe_decode_bw_eff``: the fastest whole decode step measured (weight and KV bytes over
  the step's time, CUDA graphs), over the datasheet HBM bandwidth (the presets' ``memory_bandwidth``). Only
  the H200 file times whole decode steps; the other GPU types take its fraction of their own datasheet
  bandwidth (B200 and GB200 scaled by their tables' achieved streaming ratio).

No lower bound is sourced: the knobs price whole passes and decode steps, time outside the GEMMs and the
HBM streams included (the knob model has no other term for it), and no microbenchmark bounds that from
below; the lower bound stays the knob's range. A GPU type without a source (``h20``, ``l40s``, a custom GPU)
takes the largest upper bound of any sourced type (:data:`DEFAULT_GPU`): no measured GPU exceeds it.

The bounds apply to fitting. A value a config gives (``[hardware] decode_bw_eff: 0.95``) above its GPU type's
upper bound is kept, since the user may have better hardware data, but it prices the GPU faster than any
measurement did: :func:`above_bound_messages` words the warning the config loader issues
(:class:`~packplace.errors.KnobAboveBoundWarning`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from packplace.placement.problem.hardware import PRESETS

#: Knobs that can be fitted and their range (fractions of peak in (0, 1]; seconds ≥ 0): the bounds of a
#: knob without a physical bound (:data:`FRACTION_KNOBS`), and the lower bound of every knob.
KNOB_BOUNDS: dict[str, tuple[float, float]] = {
    "gemm_peak_fraction": (0.02, 1.0),
    "gemm_m_half": (0.01, 200.0),
    "decode_bw_eff": (0.02, 1.0),
    "decode_step_overhead": (0.0, 0.5),
    "phase_overhead": (0.0, 600.0),
    "moe_decode_bw_eff": (0.02, 1.0),
    "moe_gemm_peak_fraction": (0.01, 1.0),
    "inprocess_host_per_sequence": (0.0, 0.002),
}
#: The efficiency knobs with a physical upper bound per GPU type, and which bound: ``gemm`` (:data:`GEMM_UPPER`)
#: or ``decode`` (:data:`DECODE_UPPER`).
FRACTION_KNOBS: dict[str, str] = {"gemm_peak_fraction": "gemm", "moe_gemm_peak_fraction": "gemm",
                                  "decode_bw_eff": "decode", "moe_decode_bw_eff": "decode"}
#: Why the lower bounds are the knobs' ranges (module docstring).
NO_LOWER_SOURCE = ("the knob's range: no source bounds a whole pass or decode step from below (it holds the "
                   "time outside GEMMs and HBM streams)")
#: Key of the bounds a GPU type without a source takes (a custom GPU, ``h20``, ``l40s``).
DEFAULT_GPU = "default"

_H200_FILE = "benchmarks/hardware/h200/measurements.json"
#: TFLOP/s of the fastest of the file's 9 ``peak.gemm_*`` rows (``gemm_16384x4096x14336``, the training shape
#: of a 16,384-token micro-batch through an 8B model's MLP; ``gemm_8192`` reached 750.8).
H200_GEMM_TFLOPS = 775.1649229549182
#: TB/s of the fastest of the file's 34 ``decode`` rows (llama3.1-8b, B 64, ctx 8,192, run 2: weight + KV bytes
#: over the CUDA-graph step); its ``peak.copy`` streams 4.215 TB/s (read + written), a single kernel.
H200_DECODE_TBPS = 4.144326728570382
#: Maximum Achievable Matmul FLOPS, BF16 ``torch.matmul`` at the best shape of a ``mamf-finder.py`` search
#: (github.com/stas00/ml-engineering @ b9e29720, ``compute/accelerator/README.md``, "Maximum Achievable Matmul
#: FLOPS comparison table"), TFLOP/s: A100 SXM (torch 2.6.0+cu126), H100 SXM (2.7.0+cu126), B200 and GB200 (the
#: B200 / GB200 component tables' ``gemm_achieved`` sources).
MAMF_TFLOPS = {"a100-80gb-sxm": 271.2, "h100-sxm": 794.5, "b200": 1745.0, "gb200": 1822.0}
#: The B200 / GB200 tables' achieved HBM-streaming ratio over the H200 (cuDNN 9.27 decode attention, NVIDIA
#: cudnn-frontend decode sweep: best GB/s of each GPU, 7,238.5 and 7,667.9 over 4,499.9).
HBM_ACHIEVED_OVER_H200 = {"b200": 7238.5 / 4499.891, "gb200": 7667.944 / 4499.891}


def _peak(gpu: str) -> float:
    return float(PRESETS[gpu]["flops_per_gpu"]) / 1e12


def _bandwidth(gpu: str) -> float:
    return float(PRESETS[gpu]["memory_bandwidth"]) / 1e12


def _mamf(gpu: str, die: str = "") -> tuple[float, str]:
    name = die or gpu
    value = MAMF_TFLOPS[name] / _peak(gpu)
    same = f" (the {gpu} is {name} silicon)" if die else ""
    return value, (f"{MAMF_TFLOPS[name]:g} of {_peak(gpu):g} TFLOP/s: the best BF16 matmul measured on {name}"
                   f"{same}, stas00/ml-engineering MAMF table")


def _decode(gpu: str) -> tuple[float, str]:
    ratio = HBM_ACHIEVED_OVER_H200.get(gpu, _bandwidth(gpu) / _bandwidth("h200"))
    value = H200_DECODE_TBPS * ratio / _bandwidth(gpu)
    how = ("the H200's fastest decode step" + (f" x {ratio:.3f} (the {gpu} table's achieved streaming ratio)"
                                               if gpu in HBM_ACHIEVED_OVER_H200 else
                                               ", the same fraction of this GPU's datasheet bandwidth"))
    return value, f"{value:.3f} of {_bandwidth(gpu):g} TB/s: {how}, {_H200_FILE} decode rows"


#: Upper bound of the GEMM fractions per GPU type (canonical preset name): ``(value, source)``.
GEMM_UPPER: dict[str, tuple[float, str]] = {
    "h200": (H200_GEMM_TFLOPS / _peak("h200"),
             f"{H200_GEMM_TFLOPS:.1f} of {_peak('h200'):g} TFLOP/s: the fastest peak.gemm_* row of {_H200_FILE}"),
    "h100-sxm": _mamf("h100-sxm"),
    "a100-80gb-sxm": _mamf("a100-80gb-sxm"),
    "a800": _mamf("a800", die="a100-80gb-sxm"),
    "b200": _mamf("b200"),
    "gb200": _mamf("gb200"),
}
#: Upper bound of the decode-streaming fractions per GPU type: ``(value, source)``.
DECODE_UPPER: dict[str, tuple[float, str]] = {
    gpu: _decode(gpu) for gpu in ("h200", "h100-sxm", "a100-80gb-sxm", "a800", "b200", "gb200")}
for _table in (GEMM_UPPER, DECODE_UPPER):   # a GPU type without a source: the loosest sourced bound
    _loosest = max(_table, key=lambda g: _table[g][0])
    _table[DEFAULT_GPU] = (_table[_loosest][0], f"no source for this GPU type: the largest bound of a sourced one "
                                                f"({_loosest}: {_table[_loosest][1]})")


@dataclass(frozen=True)
class KnobBound:
    """The interval a knob is fitted in, with the source of each end."""

    lower: float
    upper: float
    lower_source: str
    upper_source: str

    def limit(self, value: float) -> dict[str, object] | None:
        """``{"side": "lower" | "upper", "bound": value, "source": ...}`` when ``value`` sits at a bound
        (within 1e-6 of the interval), else None."""
        tol = 1e-6 * (self.upper - self.lower)
        for side, bound, source in (("lower", self.lower, self.lower_source),
                                    ("upper", self.upper, self.upper_source)):
            if math.isclose(value, bound, rel_tol=1e-6, abs_tol=tol):
                return {"side": side, "bound": bound, "source": source}
        return None


def canonical_gpu(name: str) -> str:
    """The canonical preset name of ``name`` (``a100`` → ``a100-80gb-sxm``); :data:`DEFAULT_GPU` for a name that
    is no preset (a custom GPU)."""
    preset = PRESETS.get(name)
    if preset is None:
        return DEFAULT_GPU
    return next(k for k, v in PRESETS.items() if v is preset)


def knob_bound(knob: str, gpus: str | tuple[str, ...] | frozenset[str] = DEFAULT_GPU) -> KnobBound:
    """Where ``knob`` may be fitted for a value shared by the GPU types ``gpus`` (one name, or several for a
    framework-scoped value): the range of :data:`KNOB_BOUNDS`, and for a :data:`FRACTION_KNOBS` knob the
    tightest physical upper bound among ``gpus``.

    Raises:
        KeyError: ``knob`` is not a fittable knob (the callers check names first).
    """
    lower, upper = KNOB_BOUNDS[knob]
    kind = FRACTION_KNOBS.get(knob)
    if kind is None:
        return KnobBound(lower, upper, "the knob's range", "the knob's range")
    table = GEMM_UPPER if kind == "gemm" else DECODE_UPPER
    names = (gpus,) if isinstance(gpus, str) else tuple(sorted(gpus)) or (DEFAULT_GPU,)
    value, source = min((table.get(canonical_gpu(g), table[DEFAULT_GPU]) for g in names), key=lambda t: t[0])
    return KnobBound(lower, min(upper, value), NO_LOWER_SOURCE, source)


def above_bound_messages(given: dict[str, float], gpu: str | None) -> list[str]:
    """One warning line per :data:`FRACTION_KNOBS` knob of ``given`` (the ``[hardware]`` fields a config sets,
    after its checks) whose value exceeds its physical upper bound for the GPU type ``gpu`` (a preset name;
    None: a custom GPU, :data:`DEFAULT_GPU`): the field, the value, the bound and its source. Values at or
    below the bound give none."""
    out = []
    for knob in FRACTION_KNOBS:
        value = given.get(knob)
        if value is None:
            continue
        bound = knob_bound(knob, gpu or DEFAULT_GPU)
        if value > bound.upper:
            what = "a custom GPU" if canonical_gpu(gpu or DEFAULT_GPU) == DEFAULT_GPU else canonical_gpu(gpu or "")
            out.append(f"[hardware] {knob}: {value:g} is above its physical bound {bound.upper:.4g} for {what} "
                       f"({bound.upper_source}); kept, but the model now prices this GPU faster than it was "
                       f"ever measured to run")
    return out
