"""The dead-man pass's external heartbeat (`[watch] ping`): healthchecks.io style.

Each pass POSTs a short summary to the URL held in a systemd credential, or to its `/fail` variant
when the pass found something new or could not do its job. The URL is a secret: it is never
logged. A failed ping is logged and never fails the pass.
"""

from __future__ import annotations

import logging

from market_timers.channels.credentials import read_credential
from market_timers.config.watch import WatchConfig
from market_timers.watch.findings import PassResult

log = logging.getLogger("market_timers.watch")


def ping_url(watch: WatchConfig, env: dict | None = None) -> str | None:
    return read_credential(watch.ping_credential, env)


def heartbeat(watch: WatchConfig, result: PassResult, env: dict | None) -> None:
    """Ping for this pass (when `[watch] ping` is on); records the outcome in `result`."""
    if not watch.ping:
        return
    url = ping_url(watch, env)
    if url is None:
        log.warning("deadman: [watch] ping is on but credential %s is not available "
                    "(LoadCredential=%s in market-deadman.service, file in /etc/credstore)",
                    watch.ping_credential, watch.ping_credential)
        result.errors.append("heartbeat credential missing")
        return
    result.ping = "fail" if result.failed else "ok"
    body = summary(result)
    result.ping_delivered = send_ping(url, fail=result.failed, body=body,
                                      timeout=watch.ping_timeout)


def summary(result: PassResult) -> str:
    lines = [f"{f.kind}: {f.job or '-'} {f.session or ''}".rstrip() for f in result.new]
    lines += [f"error: {e}" for e in result.errors]
    lines += [f"not working: {u}" for u in result.unhealthy]
    lines.append(f"{len(result.findings)} open finding(s), {len(result.new)} new")
    return "\n".join(lines)


def send_ping(url: str, *, fail: bool, body: str = "", timeout: float = 5.0) -> bool:
    """healthchecks.io style: POST to the URL, or to URL/fail, within `timeout` seconds in all.

    Never raises. Nothing derived from the URL is logged (it is a secret): neither the URL nor
    an exception text that could embed it (a control character in the URL used to put the
    whole URL into the journal through the exception text). A 3xx is not a ping received.
    """
    # here, not at the top: http.client and ssl cost a pass that does not ping (the default)
    from market_timers.channels.httppost import PostError, post

    target = url.rstrip("/") + "/fail" if fail else url
    what = " /fail" if fail else ""
    try:
        response = post(target, body.encode()[:10000],
                        {"User-Agent": "market-timers-deadman",
                         "Content-Type": "text/plain; charset=utf-8"}, timeout)
    except PostError as e:
        log.warning("deadman: heartbeat ping%s failed: %s", what, str(e).replace(url, "[url]"))
        return False
    except Exception as e:  # a bug must not fail the pass; its text could hold the URL
        log.warning("deadman: heartbeat ping%s failed: %s", what, type(e).__name__)
        return False
    if 200 <= response.status < 300:
        return True
    log.warning("deadman: heartbeat ping%s failed: the monitor answered HTTP %d%s", what,
                response.status, " (a redirect: not followed; configure the final URL)"
                if 300 <= response.status < 400 else "")
    return False
