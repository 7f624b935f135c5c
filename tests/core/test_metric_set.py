"""MetricSet: metrics declared as class attributes, registered in declaration order."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from shadoweval.probes import MetricSet, counter, gauge, histogram


class _Base(MetricSet):
    first = counter("t_first_total", "First.", "kind")


class _Metrics(_Base):
    second = gauge("t_second", "Second.")
    third = histogram("t_third_seconds", "Third.", buckets=(0.1, 1.0))


def test_declared_metrics_are_registered_in_order_base_first() -> None:
    metrics = _Metrics()
    assert isinstance(metrics.first, Counter)
    assert isinstance(metrics.second, Gauge)
    assert isinstance(metrics.third, Histogram)
    metrics.first.labels(kind="a").inc()
    text = generate_latest(metrics.registry).decode()
    assert text.index("t_first_total") < text.index("t_second") < text.index("t_third_seconds")
    assert 't_first_total{kind="a"} 1.0' in text
    assert 'le="0.1"' in text


def test_each_set_registers_its_own_metrics() -> None:
    registry = CollectorRegistry()
    one = _Metrics(registry)
    assert one.registry is registry
    other = _Metrics()
    one.second.set(2)
    assert registry.get_sample_value("t_second") == 2
    assert other.registry.get_sample_value("t_second") == 0
