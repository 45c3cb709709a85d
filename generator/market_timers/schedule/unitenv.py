"""The Environment= of a job's service: the job's MARKET_* context, which the runner reads (its
session, schedule, lock group, ledger, retries, pre-fire), then the job's own variables.
"""

from __future__ import annotations

from market_timers.config.loader import Config, Job
from market_timers.contracts import environment


def job_home(config: Config, job: Job) -> list[str]:
    """What the job may write beside the scheduler's: its home (its own, made by sync; the
    shared default user's, by the package) and the [shared] directories it lists."""
    home = config.home_of(job)
    return [*([home] if home else []), *(config.shared[n] for n in job.shared)]


def job_environment(config: Config, job: Job, context: list) -> list[tuple[str, str]]:
    """Environment= of a job's service: its MARKET_* context, then the job's own variables."""
    return [(environment.JOB, job.name), (environment.JOB_USER, config.user_of(job)),
            *context,
            (environment.SEVERITY, job.severity),
            (environment.GRACE_SEC, str(job.grace)),
            (environment.LOCK_GROUP, job.lock),
            (environment.LOCK_DIR, str(config.runtime_dir)),
            (environment.STATE_DIR, str(config.state_dir)),
            (environment.EVENTS_DIR, str(config.spool_dir / "events")),  # jobnotify.event
            *cluster_environment(config),
            *([(environment.JOB_CREDENTIALS, ",".join(job.credentials))] if job.credentials
              else []),
            *([(environment.REQUIRES, ",".join(job.requires))] if job.requires else []),
            *([(environment.REQUIRES_WAIT_SEC, str(job.requires_wait))] if job.requires_wait
              else []),
            *([(environment.PAUSE_ON_FAILURE, "1")] if job.pause_on_failure else []),
            *([(environment.ORDERS, "1")] if job.orders else []),
            *([(environment.OPERATOR_GROUP, config.operator_group)] if config.operator_group
              else []),
            ("PYTHONFAULTHANDLER", "1"), *retry_environment(job),
            *pre_fire_environment(job), *job.environment]


def cluster_environment(config: Config) -> list[tuple[str, str]]:
    """What the runner needs to claim in the cluster ledger (the DSN is a credential)."""
    if config.cluster is None:
        return []
    return [(environment.LEDGER, "postgresql"), (environment.NODE, config.cluster.node),
            (environment.STANDBY_DELAY_SEC, str(config.cluster.standby_delay)),
            (environment.ON_DB_UNREACHABLE, config.cluster.on_db_unreachable),
            (environment.MAX_CLOCK_SKEW_MS, str(config.cluster.max_clock_skew_ms))]


def pre_fire_environment(job: Job) -> list[tuple[str, str]]:
    """How early the timer fires (the runner waits for the instant) and how early the job is
    exec'd (warm); none when the job opts out with lead = "0s"."""
    out = [(environment.LEAD_SEC, str(job.fire_lead))] if job.fire_lead else []
    return out + ([(environment.WARM_SEC, str(job.warm))] if job.warm else [])


def retry_environment(job: Job) -> list[tuple[str, str]]:
    """The runner's retry context (retries.py); nothing for a job that is never retried."""
    if not job.retries:
        return []
    return [(environment.RETRIES, str(job.retries)),
            (environment.RETRY_DELAY_SEC, str(job.retry_delay)),
            (environment.RETRY_DELAY_MAX_SEC, str(job.retry_delay_max)),
            (environment.TIMEOUT_SEC, str(job.timeout))]
