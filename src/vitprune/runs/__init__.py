"""How a method runs, on its own or in a chain: the method protocol and its registry (:mod:`~vitprune.runs.method`),
what every run takes (:mod:`~vitprune.runs.context`: the data, the context, the one entry point), the stages and
report every run shares (:mod:`~vitprune.runs.stages`, :mod:`~vitprune.runs.report`), the claim on an output
(:mod:`~vitprune.runs.claim`), chains (:mod:`~vitprune.runs.steps`, :mod:`~vitprune.runs.chain`) and the printed
views every report shares (:mod:`~vitprune.runs.render`). The methods themselves are in :mod:`vitprune.methods`."""

from vitprune.lazy import lazy_exports
from vitprune.runs.context import MethodData, RunContext, method_run
from vitprune.runs.method import (
    ChainStep, CommandLine, Method, TargetSearch, get_method, methods, register_method, unregister_method,
)
from vitprune.runs.steps import ChainConfig, Step, load_chain, parse_chain

__getattr__, __dir__ = lazy_exports(__name__, {
    ".chain": ("ChainReport", "run_chain"),
    ".report": ("Report", "RunReport"),
})

__all__ = ["ChainConfig", "ChainReport", "ChainStep", "CommandLine", "Method", "MethodData", "Report", "RunContext",
           "RunReport", "Step", "TargetSearch", "get_method", "load_chain", "method_run", "methods", "parse_chain",
           "register_method", "run_chain", "unregister_method"]
