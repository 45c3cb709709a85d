"""The watch: what tells someone when a run did not happen, or will not.

Two of the five flows start here (each run by a systemd timer of the package, through the CLI):

* miss -> deadman: market-deadman.timer (every minute) -> `market-timers deadman` ->
  deadman.command() -> deadman.run_pass(): plan.json and its deadlines (fires.py), the run
  ledger (runrecord.py), periodic jobs' slots (slots.py), what was found and its alert text
  (findings.py), what was already reported (reported.py, deadman.json), the external heartbeat
  (heartbeat.py).
* refresh: market-refresh.timer (daily and after boot) -> `market-timers refresh` ->
  refresh.main_from_path() -> refresh.run_refresh(): sync.sync(), then the alerts on what changed
  (changes.py), on calendar data that ends soon or is old (calendar_warnings.py), at most once a
  day (oncedaily.py); as root, the alerts are raised as the package user (privileges.run_as).

And `market-timers status` (status.py) reads the same state. `[watch]` is config.py; alert.py is
the one door to the alert layer (alerts/api.py), which spools and delivers.
"""
