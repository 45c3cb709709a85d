"""The fake Telegram Bot API of tests/fakes/http_api.py on the host's 127.0.0.1 (loopback only),
with each received message stamped with the host's time.time() on arrival."""

from __future__ import annotations

import time

from bench.common import ensure_repo_on_path

ensure_repo_on_path()

from tests.fakes.http_api import FakeApi  # noqa: E402

TOKEN_CREDENTIAL = "/etc/credstore/market-timers.telegram-token"
TOKEN = "123456:bench-token"


class StampedFakeApi(FakeApi):
    def _record(self, entry: dict) -> None:
        super()._record({**entry, "received": time.time()})


def alerts_toml(base: str) -> str:
    return ("[alerts]\nrepeat_minutes = 0\n\n[alerts.telegram]\n"
            f'chat_id = "1"\napi_base = "{base}"\n')


def install_token(box) -> None:
    box.write_file(TOKEN_CREDENTIAL, TOKEN + "\n", 0o600)
