"""Alerts: what happened to a job run -> a classified alert -> a channel, through a durable outbox.

failure/success handler (handler.py) -> classify.py -> api.raise_alert -> router.py (severity ->
channel chain, dedup window) -> outbox.py (fsync + rename before any send) -> delivery.py ->
channels/ (one module per channel). escalation.py repeats unacknowledged criticals, digest.py
mails the per-session summary. Nothing here imports pandas or exchange_calendars: the handlers
run after every job and must start fast.
"""
