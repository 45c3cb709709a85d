"""Loopback fakes of the alert channels, usable from tests and as standalone processes.

    python -m tests.fakes.http_api --port N --log FILE   # Telegram + Slack + webhook
    python -m tests.fakes.smtp --port N --log FILE        # aiosmtpd, optional STARTTLS + AUTH
"""
