"""market-timers.toml: every table of the file, each declared in its own module (jobs, cluster,
metrics, watch, events, alerts) as a schema Table (schema/table.py), the list of them all with
their man page sections (tables), and the loader that reads the file and checks them all
(loader).
The exchange-calendar checks, which need exchange_calendars, are schedule/calendar_checks.py.
This face imports nothing, so that a part that needs one table loads only that one.
"""
