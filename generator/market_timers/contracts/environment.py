"""The unit <-> runner contract: every MARKET_* variable of a job unit's Environment= (written by
schedule/render.py, read by the runner, its record step, the alert handler and the job), and the
default paths. One name each, here; nothing else spells them. Import-light: the runner's hot
path loads this, so it holds constants and nothing that imports.

What a job reads (documented in market-timers-run(1)): JOB, SESSION, SCHEDULED_UTC, CALENDAR,
CALENDARS, EVENT, SEVERITY, ATTEMPT, FENCE, SLOT_UTC, the EVENTS_DIR of jobnotify.event() and, after a
pre-fired wait, EXEC_AT_WOKE and EXEC_AT_RUSAGE. The rest is the runner's context.
"""

# Default paths (the config's state_dir, spool_dir and runtime_dir, market-timers.toml(5)).
DEFAULT_CONFIG = "/etc/market-timers/market-timers.toml"
DEFAULT_STATE_DIR = "/var/lib/market-timers"
DEFAULT_SPOOL_DIR = "/var/spool/market-timers"
DEFAULT_RUNTIME_DIR = "/run/market-timers"  # the lock groups' directory
# The status page's own directory (page_dir): the dead-man's status.html and nothing else, for a
# web server's user (www-data) to read; beside the state directory, never inside it.
DEFAULT_PAGE_DIR = "/var/lib/market-timers-www"
DEFAULT_GRACE_SEC = 120
# An operator's (operator_group, not root) halt, pause and resume go through here (issue 41): the
# CLI writes a request into in/ (root:<operator_group> 1730, made by sync), a root service
# (market-controls.path) runs it and answers in out/ (root:<operator_group> 0750) to its owner.
REQUESTS_DIR = "/var/lib/market-timers-requests"

# The package's own user: the scheduler's parts (runner, record step, alert handlers, events,
# outbox, dead-man, refresh) run as it and it owns the state above. Fixed: never taken from a
# config or a file. Jobs run as another user (the config's `user`, default DEFAULT_JOB_USER, made
# by sysusers.d), which owns nothing the scheduler relies on.
PACKAGE_USER = "market-timers"
DEFAULT_JOB_USER = "market-jobs"
# The event spool's group (the package's sysusers.d): the runner gives it to every job, and a
# trading system's user joins it, to write events (the spool directories are 3770, this group's);
# it reads nothing of the state, which is the package's group's (issue 41).
SPOOL_GROUP = "market-timers-spool"
DEFAULT_JOB_HOME = "/var/lib/market-jobs"  # the default job user's home (sysusers.d, tmpfiles.d)
# util-linux's setpriv(1) (Essential on Debian): the runner's child execs it to become the job's
# user with no capability left (runner/jobuser.py).
SETPRIV = "/usr/bin/setpriv"

# The pre-fired unit's priority, which the unit tells the runner beyond its environment: render.py
# writes `Nice=PRE_FIRE_NICE` into a unit with a lead (MARKET_LEAD_SEC), so that the runner's
# wake-up at the instant is not queued behind other work; the runner (runner/nice.py) recognises
# that value and returns the job to DEFAULT_NICE, the value of a unit without `Nice=` (a service
# inherits the service manager's, 0), unless a drop-in's `Nice=` set it.
PRE_FIRE_NICE = -10
DEFAULT_NICE = 0

# The config's path and the templates' directory (the command line's, not a unit's).
CONFIG = "MARKET_TIMERS_CONFIG"
TEMPLATES = "MARKET_TIMERS_TEMPLATES"

# Every job unit.
JOB = "MARKET_JOB"
JOB_USER = "MARKET_JOB_USER"  # the user the runner runs the job as (it runs as PACKAGE_USER)
# The config's operator_group: a job whose user is in it is refused (runner/jobuser.py).
OPERATOR_GROUP = "MARKET_OPERATOR_GROUP"
# The job's own credentials (`credentials`, comma-separated): the unit loads them with
# LoadCredential=, the runner hands the job a copy of these only (runner/jobcredentials.py).
JOB_CREDENTIALS = "MARKET_JOB_CREDENTIALS"
SESSION = "MARKET_SESSION"
CALENDAR = "MARKET_CALENDAR"  # a job on several calendars: the one whose event it took
CALENDARS = "MARKET_CALENDARS"  # a job on several calendars: all of them, comma-separated
EVENT = "MARKET_EVENT"
SEVERITY = "MARKET_SEVERITY"
GRACE_SEC = "MARKET_GRACE_SEC"
LOCK_GROUP = "MARKET_LOCK_GROUP"
LOCK_DIR = "MARKET_LOCK_DIR"
STATE_DIR = "MARKET_STATE_DIR"
EVENTS_DIR = "MARKET_EVENTS_DIR"
# A one-shot fire, or a daily job's time of day.
SCHEDULED_UTC = "MARKET_SCHEDULED_UTC"
DAILY_UTC = "MARKET_DAILY_UTC"
# Pre-fire (`lead`) and warm jobs.
LEAD_SEC = "MARKET_LEAD_SEC"
WARM_SEC = "MARKET_WARM_SEC"
# Set by market-timers-exec-at (generator/exec_at.c, which spells them too: C) for the job it
# execs after a pre-fired wait: the realtime clock's reading that ended the wait (SEC.NSEC), and
# the process's "MINFLT MAJFLT NVCSW NIVCSW" (getrusage) just before the exec: a job's own
# getrusage() minus these is the exec's share (bench/alternatives.py's per-fire attribution).
EXEC_AT_WOKE = "MARKET_EXEC_AT_WOKE"
EXEC_AT_RUSAGE = "MARKET_EXEC_AT_RUSAGE"
# Retries.
RETRIES = "MARKET_RETRIES"
RETRY_DELAY_SEC = "MARKET_RETRY_DELAY_SEC"
RETRY_DELAY_MAX_SEC = "MARKET_RETRY_DELAY_MAX_SEC"
TIMEOUT_SEC = "MARKET_TIMEOUT_SEC"
# `requires`: the jobs (comma-separated) that must have succeeded in the session first.
REQUIRES = "MARKET_REQUIRES"
# `requires_wait`: seconds a start waits for a required job still running or not yet started.
REQUIRES_WAIT_SEC = "MARKET_REQUIRES_WAIT_SEC"
# `pause_on_failure = true`: the record step pauses the job's lock group after its failure.
PAUSE_ON_FAILURE = "MARKET_PAUSE_ON_FAILURE"
# `orders = true`: the job sends orders, so `market-timers halt` (no scope) covers it.
ORDERS = "MARKET_ORDERS"
# A periodic job's slots (runner/slotclock.py).
SLOT_FIRST_UTC = "MARKET_SLOT_FIRST_UTC"
SLOT_EVERY_SEC = "MARKET_SLOT_EVERY_SEC"
SLOT_LAST_UTC = "MARKET_SLOT_LAST_UTC"
SLOT_PAUSE_UTC = "MARKET_SLOT_PAUSE_UTC"
# The cluster ledger.
LEDGER = "MARKET_LEDGER"
NODE = "MARKET_NODE"
STANDBY_DELAY_SEC = "MARKET_STANDBY_DELAY_SEC"
ON_DB_UNREACHABLE = "MARKET_ON_DB_UNREACHABLE"
MAX_CLOCK_SKEW_MS = "MARKET_MAX_CLOCK_SKEW_MS"  # the claim's clock bound (ledger/postgresql.py)
CLUSTER_DSN_FILE = "MARKET_CLUSTER_DSN_FILE"
CLUSTER_OPERATOR_DSN_FILE = "MARKET_CLUSTER_OPERATOR_DSN_FILE"  # resume's role (ledger/pgdsn.py)
HALT_MIRROR_DIR = "MARKET_HALT_MIRROR_DIR"  # the cluster's halts on this node (ledger/haltmirror.py)
DEFAULT_HALT_MIRROR_DIR = "/var/lib/market-halt-watch"  # halt-watch's StateDirectory=

# Set by `market-timers run` (the ticket: its one-off unit's name; the nonce comes as the credential
# TICKET_CREDENTIAL, from a file only root writes) and by the runner for the job it execs.
TICKET = "MARKET_TICKET"
TICKET_CREDENTIAL = "market-timers.ticket"
SLOT = "MARKET_SLOT"
SLOT_UTC = "MARKET_SLOT_UTC"
ATTEMPT = "MARKET_ATTEMPT"
FENCE = "MARKET_FENCE"
# The job's end of a socket to its supervisor, which answers `market-timers fence check` over its
# own ledger connection (the job holds neither the DSN nor a database session: runner/jobuser.py).
FENCE_FD = "MARKET_FENCE_FD"

NAMES = tuple(v for k, v in dict(globals()).items() if k.isupper() and isinstance(v, str)
              and v.startswith("MARKET_"))
