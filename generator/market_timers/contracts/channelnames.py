"""The alert channels' names, in the default `fallback` order: the config's `[alerts.<name>]`
tables, `alert --test NAME`, the credential names and the metrics' `channel` label all use them.

Kept apart from the channel registry (channels/__init__.py, which re-exports it) so that the
command line's --help and `market-timers event` do not import the channels' HTTP and SMTP
clients (about 80 ms of a 0.1 s command, `python -X importtime`).
"""

NAMES = ("telegram", "slack", "email", "webhook", "pagerduty", "ntfy")
