"""Measurement: MACs and parameters of the model as it is, and honest wall-clock speed."""

from vitprune.measure.context import Context, OtherLoad, collect_context, device_name, watch_other_load
from vitprune.measure.macs import (CONVENTIONS, FLOP_COUNTER_REFERENCE, BlockMacs, MacReport, count_macs,
                                   flop_counter_macs, format_count, resolve_input_size, tp_macs, value_padding_macs)
from vitprune.measure.speed import (Comparison, SpeedConfig, SpeedResult, Spread, compare_speed,
                                    measure_speed)

__all__ = [
    "CONVENTIONS",
    "FLOP_COUNTER_REFERENCE",
    "BlockMacs",
    "Comparison",
    "Context",
    "MacReport",
    "OtherLoad",
    "SpeedConfig",
    "SpeedResult",
    "Spread",
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
