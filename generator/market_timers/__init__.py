"""market-timers: run a trading system's jobs on its exchange's calendar with systemd timers.

The five flows, each in one place:

* plan -> units:     config.py (+ job_config.py), calendars.py, plan.py, render.py (sync.py
                     installs them)
* timer -> run:      runner.py (hot path: no pandas, no exchange_calendars), jobnotify.py
* failure -> alert:  alerts/ (handler.py, router.py, outbox.py, channels/)
* miss -> deadman:   watch/deadman.py (market-deadman.timer, every minute), runrecord.py
* refresh:           watch/refresh.py (market-refresh.timer, daily), which runs sync.py
"""

__version__ = "0.1.0"
