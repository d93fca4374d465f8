"""The in-cluster exporter: Node condition transitions to EventBridge, loss-free.

Layers, each importable and testable alone: ``settings`` (typed, from flags and environment) ->
``transitions`` (pure: Node JSON to events) -> ``queue`` (bounded, overflow policy) ->
``publisher`` (PutEvents with per-entry retry) and ``watcher`` (list + watch) / ``leader`` (Lease)
adapters over ``kubeclient``; ``pipeline`` and ``app`` wire them. Run it with ``nodeheal exporter``
or ``python -m nodeheal.exporter``.
"""
