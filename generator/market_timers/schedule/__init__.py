"""config -> plan -> units: the exchange calendars (calendars, the only importer of
exchange_calendars, and calendar_checks), the plan of job x session -> UTC instant (plan, periodic
for slots, planview for what `plan` prints), the units rendered from it (render, unitescape) and
made live (sync, syncreport), and the commands built on them (verify, trial for `try`,
manual_run for `run`, cron_check for `check-cron`).
"""
