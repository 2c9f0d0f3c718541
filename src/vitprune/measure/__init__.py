"""Measurement: MACs and parameters of the model as it is, and honest wall-clock speed."""

from vitprune.lazy import lazy_exports
from vitprune.measure.config import BUSY_CORES, CONVENTIONS, SpeedConfig, busy_note, format_count
from vitprune.measure.target import MacTarget

__getattr__, __dir__ = lazy_exports(__name__, {
    ".context": ("Context", "OtherLoad", "collect_context", "device_name", "watch_other_load"),
    ".macs": ("FLOP_COUNTER_REFERENCE", "BlockMacs", "MacReport", "count_macs", "flop_counter_macs",
             "resolve_input_size", "tp_macs", "value_padding_macs"),
    ".speed": ("Comparison", "SpeedResult", "Spread", "compare_speed", "measure_speed"),
})

__all__ = [
    "BUSY_CORES",
    "CONVENTIONS",
    "FLOP_COUNTER_REFERENCE",
    "MacTarget",
    "BlockMacs",
    "Comparison",
    "Context",
    "MacReport",
    "OtherLoad",
    "SpeedConfig",
    "SpeedResult",
    "Spread",
    "busy_note",
    "collect_context",
    "compare_speed",
    "count_macs",
    "device_name",
    "flop_counter_macs",
    "format_count",
    "measure_speed",
    "resolve_input_size",
    "tp_macs",
    "value_padding_macs",
    "watch_other_load",
]
