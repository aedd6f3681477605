"""Helpers shared by the benchmarks, one concern a module; import from the module.

* :mod:`~ops.bench.common.stats`    - percentiles, medians, rounding for reports
* :mod:`~ops.bench.common.machine`  - what the figures were measured on
* :mod:`~ops.bench.common.cpu`      - CPU seconds of processes and of the whole machine
* :mod:`~ops.bench.common.env`      - the run's namespace, environment and scratch folder
* :mod:`~ops.bench.common.workers`  - Celery worker subprocesses of one namespace
* :mod:`~ops.bench.common.db`       - a scratch PostgreSQL database
* :mod:`~ops.bench.common.fixtures` - realistic agent turns
* :mod:`~ops.bench.common.madial`   - MADial-Bench read in place (LTM and quality benches)

The machine these run on is small (2 cores) and shared, so every benchmark reports
medians and high percentiles measured side by side within one run, never a single
best figure, and records what else was competing for the CPU.
"""
