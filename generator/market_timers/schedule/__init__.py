"""config -> plan -> units: the exchange calendars (calendars, the only importer of
exchange_calendars, and calendar_checks), the plan of job x session -> UTC instant (plan, periodic
for slots, selection for a job's sessions, planview for what `plan` prints), the units rendered
from it (render, unitescape, credunits) and made live (sync, syncreport), and verify.
The operator's commands built on the plan are controls/'s; check-cron is cron/'s.
"""
