"""Events from the trading system (disconnects, rejections, heartbeats...): spooled by any process
of the host (`market-timers event`, `jobnotify.event`), turned into alerts, incidents and digest
lines by the `[events]` rules of the config.

spool.py     the durable write (import-light: the API's hot path) and the processor's read
config.py    the `[events]` table: severities, expected events, incident and count rules
plan_lookup.py  what the plan expects: a job's instants per session, an instant's session
store.py     open incidents, per-session incident logs, counts (JSON under <state_dir>/events/)
engine.py    one event or one clock tick -> the router (raise_alert) and the store
process.py   drain the spool(s) in arrival order, tick the deadlines; the CLI entry points
replay.py    feed a recorded stream through the same engine under an injected clock
"""
