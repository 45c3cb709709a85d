"""Where the ledger and the runner's other records live under the state directory: named here
and nowhere else (os.path only: the runner's start uses it)."""

import os

# The layout of <state_dir> below the ledger:
#   ledger/<job>/<session>[+<slot>]/attempt-N    the claims (ledger/local.py)
#   ledger/tickets/<nonce>                       `market-timers run`'s one-off tickets
#   ledger/paused-groups/<group>                 a lock group's pause after a failure
#                                                (pause_on_failure; ledger/pauses.py)
#   controls/pause-job-<job>, pause-group-<g>    `market-timers pause` (ledger/pauses.py): root's
#                                                directory, like sync/ (with an operator_group,
#                                                root:<group> 2775); no job writes it
#   controls/halt-orders, halt-all,              `market-timers halt` (ledger/halts.py): the same
#     halt-group-<g>, halt-job-<job>             directory and trust rule as the pauses
#   runs/<job>/<session>.retry                   the retry marker between attempts (runner/retry.py)
#   runs/<job>/<session>/<slot>.json             a periodic job's slot records (runner/slotclock.py)
#   runs/<job>/<session>/.invocation-<id>        which slot an invocation judged, for --record
#   runs/<job>/<session>.json                    a record from before the ledger (read only)
#   sync/tickets/<unit>                          `market-timers run`'s ticket nonce, root's 0600 in a
#                                                0700 directory: its one-off unit loads it as the
#                                                credential TICKET_CREDENTIAL (manual_run.py)
#   sync/alerts-snapshot.json                    the alert path's last-good config (alerts/snapshot.py):
#                                                sync/ is root's (0755), written by root's sync only,
#                                                so nothing the package's user or a job writes
#                                                decides where alerts go
LEDGER_DIR = "ledger"
SYNC_DIR = "sync"
TICKETS_DIR = "tickets"
RUNS_DIR = "runs"


def sync_dir(state_dir) -> str:
    return os.path.join(state_dir, SYNC_DIR)


def ticket_source(state_dir, unit: str) -> str:
    return os.path.join(state_dir, SYNC_DIR, TICKETS_DIR, unit)


def runs_dir(state_dir, job: str | None = None) -> str:
    """<state_dir>/runs, or runs/<job>."""
    root = os.path.join(state_dir, RUNS_DIR)
    return os.path.join(root, job) if job else root


def job_ledger_dir(state_dir, job: str) -> str:
    return os.path.join(state_dir, LEDGER_DIR, job)


def retry_marker_path(state_dir, job: str, session: str) -> str:
    return os.path.join(state_dir, RUNS_DIR, job, f"{session}.retry")


def slot_records_dir(state_dir, job: str, session: str) -> str:
    return os.path.join(state_dir, RUNS_DIR, job, session)


def legacy_record_path(state_dir, job: str, session: str) -> str:
    return os.path.join(state_dir, RUNS_DIR, job, f"{session}.json")
