"""Email over SMTP: STARTTLS + login on 587, implicit TLS (SMTPS) + login on 465, or a plain
local relay on 25.

The dict of refused recipients that `send_message` returns is checked: all refused is a
permanent failure; some refused is delivered (a resend would duplicate to the others) with the
refused addresses logged. 4xx SMTP replies and network errors are transient, 5xx permanent.
Mail carries `Auto-Submitted: auto-generated` and a Message-ID derived from the alert id, so a
resend after a crash is recognisably the same message.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from market_timers.channels import spec
from market_timers.channels.base import Channel, DeliveryError

if TYPE_CHECKING:
    from market_timers.channels.httppost import Deadline

log = logging.getLogger("market_timers.alerts")


class EmailChannel(Channel):
    name = "email"

    def send(self, alert, to: list[str] | None = None) -> None:
        suffix = f".r{alert.repeat}" if alert.repeat else ""
        self.send_mail(alert.subject(), alert.body(), f"{alert.id}{suffix}", to=to)

    def send_mail(self, subject: str, body: str, ident: str, to: list[str] | None = None) -> None:
        # here, not at the top: a config naming this channel imports the module for its SPEC
        # (every idle dead-man pass does); only a send needs the mail modules
        from email.message import EmailMessage
        from email.utils import formatdate

        from market_timers.channels.httppost import Deadline

        s = self.settings
        recipients = list(to or s.to)
        msg = EmailMessage()
        msg["From"] = s.sender
        msg["To"] = ", ".join(recipients)
        msg["Subject"] = subject
        msg["Date"] = formatdate(localtime=False)
        msg["Message-ID"] = f"<{ident}@market-timers>"
        msg["Auto-Submitted"] = "auto-generated"
        msg["X-Market-Timers-Alert"] = ident
        msg.set_content(body)
        password = self.secret(s.password_credential) if s.username else None
        deadline = Deadline(s.timeout)  # `timeout` bounds the whole attempt, not each read
        deadline.timer.start()
        try:
            refused = self._exchange(deadline, msg, recipients, password)
        except DeliveryError:
            if deadline.expired:  # whatever smtplib made of the shut socket
                raise DeliveryError(f"email: no complete exchange within the {s.timeout:g} s "
                                    "deadline", permanent=False) from None
            raise
        finally:
            deadline.timer.cancel()
        if refused:
            log.warning("email %s: recipients refused: %s", ident, ", ".join(sorted(refused)))

    def _exchange(self, deadline, msg, recipients, password) -> dict:
        import smtplib  # only a send needs them (see send_mail)
        import ssl

        s = self.settings
        try:
            if s.implicit_tls:  # TLS from the first byte: no STARTTLS
                context = ssl.create_default_context(cafile=s.tls_ca_file or None)
                opened = _smtps(deadline)(s.host, s.port, timeout=s.timeout, context=context)
            else:
                opened = _smtp(deadline)(s.host, s.port, timeout=s.timeout)
            with opened as smtp:
                if s.starttls:
                    context = ssl.create_default_context(cafile=s.tls_ca_file or None)
                    smtp.starttls(context=context)
                if s.username:
                    smtp.login(s.username, password)
                return smtp.send_message(msg, to_addrs=recipients)
        except smtplib.SMTPRecipientsRefused as e:
            raise DeliveryError(f"email: all recipients refused ({', '.join(e.recipients)})",
                                permanent=True) from None
        except smtplib.SMTPAuthenticationError as e:
            raise DeliveryError(f"email: login refused ({e.smtp_code})", permanent=True) from None
        except smtplib.SMTPResponseException as e:
            raise DeliveryError(f"email: server answered {e.smtp_code}",
                                permanent=e.smtp_code >= 500) from None
        except smtplib.SMTPNotSupportedError:
            raise DeliveryError("email: server does not offer STARTTLS/AUTH", permanent=True) from None
        except ssl.SSLCertVerificationError:
            raise DeliveryError("email: server certificate not trusted (see tls_ca_file)",
                                permanent=True) from None
        except (smtplib.SMTPException, OSError) as e:
            raise DeliveryError(f"email: {type(e).__name__}", permanent=False) from None


def _smtp(deadline: Deadline):
    """smtplib.SMTP whose sockets the deadline can shut down (then every blocked read returns)."""
    import smtplib

    class SMTP(smtplib.SMTP):
        def _get_socket(self, host, port, timeout):
            sock = super()._get_socket(host, port, deadline.remaining())
            deadline.watch(sock)
            return sock

        def starttls(self, *args, **kwargs):
            reply = super().starttls(*args, **kwargs)
            deadline.watch(self.sock)  # the TLS socket replaced the plain one
            return reply

    return SMTP


def _smtps(deadline: Deadline):
    """smtplib.SMTP_SSL whose sockets the deadline can shut down: the plain socket is watched
    before the TLS handshake, so a server that stalls the handshake is cut off too."""
    import smtplib

    class SMTPS(smtplib.SMTP_SSL):
        def _get_socket(self, host, port, timeout):
            plain = smtplib.SMTP._get_socket(self, host, port, deadline.remaining())
            deadline.watch(plain)
            sock = self.context.wrap_socket(plain, server_hostname=self._host)
            deadline.watch(sock)
            return sock

    return SMTPS


def _validate(settings, problem) -> None:
    if not settings.to:
        problem("to", "needs at least one recipient")
    if settings.starttls and settings.implicit_tls:
        problem("implicit_tls", "is TLS from the first byte (SMTPS, port 465); starttls "
                "upgrades a plain connection (587): set one of them")


SPEC = spec.ChannelSpec(
    name="email",
    summary="mail over SMTP (STARTTLS and login on 587, implicit TLS on 465, or a local relay "
            "on 25); also the digest",
    settings=(
        spec.text("from", doc="the sender address", required=True, attr="sender"),
        spec.strings("to", "the recipients (an array)"),
        spec.text("host", "localhost", "the SMTP server"),
        spec.port("port", 25, "its port"),
        spec.flag("starttls", False, "STARTTLS before login"),
        spec.flag("implicit_tls", False, "TLS from the first byte (SMTPS, usually port 465)"),
        spec.text("username", doc="log in as this user (with the password credential)"),
        spec.credential("password_credential", "market-timers.smtp-password",
                        "the credential holding the SMTP password"),
        spec.text("tls_ca_file", doc="an extra CA to trust for TLS (a private relay); "
                                     "verification stays on"),
        spec.timeout(),
    ),
    channel=EmailChannel, validate=_validate,
)
