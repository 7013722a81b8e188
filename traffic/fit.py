"""``python -m traffic.fit PATH [--format F]``: print lognormal fits of a trace's lengths.

Prints, for prompt and output tokens, the maximum-likelihood lognormal (median, sigma),
the observed min/max, and the fit's exact clipped mean beside the trace's median and
mean, as a Python line ready to paste into ``traffic/distributions.py``. The format is
inferred from the extension (``.csv`` -> azure_csv, ``.jsonl`` -> mooncake_jsonl) unless
given. Exits with code 2 and a one-paragraph message on a bad file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from sim.errors import UserError
from traffic.distributions import LognormalDist, fit_lognormal
from traffic.traces import TRACE_FORMATS, Trace, load_trace

_FORMAT_BY_SUFFIX = {".csv": "azure_csv", ".jsonl": "mooncake_jsonl"}


def fit_trace(trace: Trace) -> dict[str, LognormalDist]:
    """Lognormal fits of ``prompt_tokens`` and ``output_tokens``, clipped to the observed range.

    Zero token counts (none in the shared traces) are left out of the fit.
    """
    fits = {}
    for field in ("prompt_tokens", "output_tokens"):
        values = getattr(trace, field)
        values = values[values > 0]
        median, sigma = fit_lognormal(values)
        fits[field] = LognormalDist(median=median, sigma=sigma, min=values.min(), max=values.max())
    return fits


def report(trace: Trace) -> str:
    """The text ``main`` prints for ``trace``."""
    lines = [f"# {trace.source_path}: {trace.rows} rows, span {trace.span_s:.1f} s, {trace.mean_rate_per_s:.4f} req/s"]
    for field, dist in fit_trace(trace).items():
        values = getattr(trace, field)
        lines.append(
            f"# {field}: trace median {np.median(values):.1f} mean {values.mean():.1f}; "
            f"fit median {dist.median:.1f} clipped mean {dist.mean:.1f}"
        )
        lines.append(
            f"LognormalDist(median={dist.median:.6g}, sigma={dist.sigma:.4f}, min={dist.min:g}, max={dist.max:g})"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m traffic.fit", description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--format", choices=TRACE_FORMATS, default=None)
    args = parser.parse_args(argv)
    fmt = args.format or _FORMAT_BY_SUFFIX.get(args.path.suffix.lower())
    try:
        if fmt is None:
            choices = ",".join(TRACE_FORMATS)
            raise UserError(f"{args.path}: cannot infer the trace format from the extension; pass --format {{{choices}}}")
        print(report(load_trace(args.path, fmt)))
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
