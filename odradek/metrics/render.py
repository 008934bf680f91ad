"""The text of /metrics, from the collectors' metric families: Prometheus' text format
0.0.4 and OpenMetrics 1.0, as prometheus_client writes them (the same bytes: labels
sorted, values as Go prints floats), for the families odradek's collectors make:
counters, gauges and histograms, without timestamps, exemplars or units.

prometheus_client's own writers check every metric and label name and escape every label
value through regular expressions: about 10 us a sample, 40 ms a scrape of a thousand
partitions on the broker's event loop. These take the names as valid (the collectors'
own, constant) and escape only the values that need it.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString


def _value(v: float) -> str:
    # floatToGoString's answer, the quick way for the usual small integers.
    if type(v) is int and -1_000_000_000_000 < v < 1_000_000:
        return f"{v}.0"
    return floatToGoString(v)


def _escape(text: str, quote: bool) -> str:
    if "\\" in text or "\n" in text or (quote and '"' in text):
        text = text.replace("\\", r"\\").replace("\n", r"\n")
        if quote:
            text = text.replace('"', r"\"")
    return text


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    if len(labels) == 1:
        ((k, v),) = labels.items()
        return f'{{{k}="{_escape(v, True)}"}}'
    return "{" + ",".join(f'{k}="{_escape(v, True)}"'
                          for k, v in sorted(labels.items())) + "}"


def render(families: Iterable[Metric], openmetrics: bool = False) -> bytes:
    out: list[str] = []
    append = out.append
    for family in families:
        name = family.name
        kind = family.type
        shown = name + "_total" if kind == "counter" and not openmetrics else name
        append(f"# HELP {shown} {_escape(family.documentation, openmetrics)}\n"
               f"# TYPE {shown} {kind}\n")
        for sample in family.samples:
            append(f"{sample.name}{_labels(sample.labels)} {_value(sample.value)}\n")
    if openmetrics:
        append("# EOF\n")
    return "".join(out).encode()
