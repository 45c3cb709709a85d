"""market-timers: run a trading system's jobs on its exchange's calendar with systemd timers.

The five flows, each in one place:

* plan -> units:     config.py (+ job_config.py), calendars.py, plan.py, render.py (sync.py
                     installs them)
* timer -> run:      runner.py (hot path: no pandas, no exchange_calendars), jobnotify.py
* failure -> alert:  alerts/ (handler.py, router.py, outbox.py, channels/)
* miss -> deadman:   deadman.py, runrecord.py
* refresh:           sync.py (run daily by market-refresh.timer)
"""

__version__ = "0.1.0"
