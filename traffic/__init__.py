"""Traffic: what is asked of the fleet -- arrival processes, length distributions, traces."""

from traffic.arrivals import (
    ARRIVAL_ADAPTER,
    ArrivalProcess,
    Diurnal,
    GammaArrivals,
    MMPPArrivals,
    PoissonArrivals,
    TraceArrivals,
)
from traffic.distributions import (
    AZURE_CONV_OUTPUT_LOGNORMAL,
    AZURE_CONV_PROMPT_LOGNORMAL,
    DISTRIBUTION_ADAPTER,
    ChoiceDist,
    ConstantDist,
    Distribution,
    EmpiricalDist,
    ExponentialDist,
    LognormalDist,
    TraceRef,
    UniformDist,
    fit_lognormal,
    sample_tokens,
)
from traffic.demand_fit import PRESETS, FittedArrivals, fit_demand
from traffic.genai_trace import GenaiTrace, GenaiTraceArrivals, load_genai_trace
from traffic.traces import Trace, load_trace

__all__ = [
    "ARRIVAL_ADAPTER", "AZURE_CONV_OUTPUT_LOGNORMAL", "AZURE_CONV_PROMPT_LOGNORMAL", "ArrivalProcess",
    "ChoiceDist", "ConstantDist", "DISTRIBUTION_ADAPTER", "Distribution", "Diurnal", "EmpiricalDist",
    "ExponentialDist", "GammaArrivals", "LognormalDist", "MMPPArrivals", "PoissonArrivals", "Trace",
    "TraceArrivals", "TraceRef", "UniformDist", "fit_lognormal", "load_trace", "sample_tokens",
    "PRESETS", "FittedArrivals", "fit_demand", "GenaiTrace", "GenaiTraceArrivals", "load_genai_trace",
]
