"""Which method, for this model, on this data, at this budget: every applicable method brought to the same target
by its own rate search, recovered the same way, measured and compared (``vitprune compare``)."""

from vitprune.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    ".arms": ("CHAINS", "Arm", "left_out", "plan_arms"),
    ".budget": ("BUDGETS", "CompareBudget", "get_budget"),
    ".config": ("CompareConfig", "check_targets"),
    ".report": ("ArmResult", "CompareReport"),
    ".run": ("compare",),
})

__all__ = ["BUDGETS", "CHAINS", "Arm", "ArmResult", "CompareBudget", "CompareConfig", "CompareReport", "check_targets",
           "compare", "get_budget", "left_out", "plan_arms"]
