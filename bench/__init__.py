"""market-timers benchmarks: `make bench` (bench/run.py) writes bench/RESULTS.md.

Each module measures one thing and runs alone: `.venv/bin/python -m bench.<name>`.
Timing never decides a unit test; these are reports, with goals checked as benchmark checks.
"""
