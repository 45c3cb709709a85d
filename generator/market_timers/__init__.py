"""market-timers: run a trading system's jobs on its exchange's calendar with systemd timers.

The five flows, each in one folder (HACKING.md, Layout; the import contract in pyproject.toml keeps
their dependencies one way):

* plan -> units:     schedule/ (config/ read by config/loader.py; sync.py installs the units)
* timer -> run:      runner/ (hot path: no pandas, no exchange_calendars), jobnotify.py in the job
* failure -> alert:  alerts/ (handler.py, router.py, outbox.py), channels/
* miss -> deadman:   watch/deadman.py (market-deadman.timer, every minute), ledger/
* refresh:           cli/refresh.py (market-refresh.timer, daily): schedule/sync.py, then
                     cli/synced.py (snapshot, metrics), then watch/'s calendar alerts

cli/ composes them (the sync, refresh and deadman commands call the metrics and the snapshot
after the flow, no flow calls another's side effects); contracts/ holds what they agree on.
"""

__version__ = "0.2.0"
