"""The cluster DSN as libpq reads it: `keyword=value ...` or a `postgresql://` URI. Two uses:
adding a parameter the DSN does not set (the runner's connect and keepalive settings), and
redacting every fragment of the DSN from libpq's error text before it reaches the journal or an
alert (libpq echoes the offending token of a malformed DSN: `invalid percent-encoded token:
"s3cr%zzet"`, `missing "=" after "passwords3cret"`).

What stays readable: the values of the keywords that name where and how to connect and are no
secret (PUBLIC: host, port, dbname, user, ... as libpq's "connection to server at ... failed"
names them anyway). Everything else is redacted: every other value (password, options, sslkey,
...), every token that is not a well-formed `keyword=value`, the URI's user information, and the
whole DSN. Hot path: str methods only; urllib only for a URI's percent-decoding, on the error path.
"""

PUBLIC = frozenset((
    "host", "hostaddr", "port", "dbname", "user", "sslmode", "gssencmode",
    "target_session_attrs", "load_balance_hosts", "connect_timeout", "keepalives",
    "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout",
    "application_name"))
REDACTED = "<redacted>"
MIN_FRAGMENT = 2  # a one-character fragment is not searched for: it would garble the message


def is_uri(dsn: str) -> bool:
    return dsn.startswith(("postgresql://", "postgres://"))


def keyword_pairs(dsn: str) -> tuple[list[tuple[str, str]], list[str]]:
    """A keyword=value DSN's (keyword, value) pairs, and its raw tokens (quotes and escapes as
    written). Parsed as libpq does: spaces around `=`, single-quoted values with backslash
    escapes; a malformed rest is one raw token."""
    pairs, tokens = [], []
    i, n = 0, len(dsn)
    while i < n:
        while i < n and dsn[i].isspace():
            i += 1
        if i >= n:
            break
        start = i
        while i < n and not dsn[i].isspace() and dsn[i] != "=":
            i += 1
        key = dsn[start:i]
        while i < n and dsn[i].isspace():
            i += 1
        if i >= n or dsn[i] != "=":  # "missing =": libpq names the word; the rest is one too
            tokens += [key, dsn[start:].strip()]
            break
        i += 1
        while i < n and dsn[i].isspace():
            i += 1
        value, quoted = [], i < n and dsn[i] == "'"
        i += quoted
        while i < n:
            c = dsn[i]
            if c == "\\" and i + 1 < n:
                value.append(dsn[i + 1])
                i += 2
                continue
            if (quoted and c == "'") or (not quoted and c.isspace()):
                i += quoted
                break
            value.append(c)
            i += 1
        pairs.append((key, "".join(value)))
        tokens.append(dsn[start:i].strip())
    return pairs, tokens


def uri_pairs(dsn: str) -> tuple[list[tuple[str, str]], list[str]]:
    """A URI's (keyword, value) pairs (user, password, host, port, dbname and the query's) and its
    raw fragments, values percent-encoded as written."""
    rest = dsn.split("://", 1)[1]
    rest, _, query = rest.partition("?")
    authority, _, path = rest.partition("/")
    pairs, raw = [], []
    if "@" in authority:
        userinfo, _, authority = authority.rpartition("@")
        user, _, password = userinfo.partition(":")
        pairs += [("user", user), ("password", password)]
        raw += [userinfo, password]
    pairs += [("host", authority), ("dbname", path)]
    for item in filter(None, query.split("&")):
        key, _, value = item.partition("=")
        pairs.append((key, value))
        raw += [item, value]
    return pairs, raw


def fragments(dsn: str) -> list[str]:
    """Every fragment of the DSN that must not be shown, longest first."""
    found = {dsn}
    if is_uri(dsn):
        from urllib.parse import unquote  # a URI DSN only (the runner's key=value DSN needs none)

        pairs, raw = uri_pairs(dsn)
        found.update(raw)
        for key, value in pairs:
            if key not in PUBLIC:
                found.update((key, value, unquote(value)))
        found.discard(dsn.split("://", 1)[0])
    else:
        pairs, tokens = keyword_pairs(dsn)
        for token in tokens:
            key, sep, value = token.partition("=")
            if not sep or key.strip() not in PUBLIC:
                found.add(token)
        for key, value in pairs:
            if key not in PUBLIC:
                found.add(value)
    return sorted((f for f in found if len(f) >= MIN_FRAGMENT), key=len, reverse=True)


def redact(message: str, dsn: str) -> str:
    """`message` with every fragment of `dsn` (see fragments) replaced by <redacted>."""
    if not dsn:
        return message
    for fragment in fragments(dsn):
        message = message.replace(fragment, REDACTED)
    return message


def has_param(dsn: str, name: str) -> bool:
    pairs = uri_pairs(dsn)[0] if is_uri(dsn) else keyword_pairs(dsn)[0]
    return any(key == name for key, _ in pairs)


def with_param(dsn: str, name: str, value: str) -> str:
    """Add a parameter to a keyword=value DSN or a postgresql:// URI."""
    if not is_uri(dsn):
        quoted = value.replace("\\", "\\\\").replace("'", "\\'")
        return f"{dsn} {name}='{quoted}'".strip()
    from urllib.parse import quote  # administrators' path only: a URI DSN

    return f"{dsn}{'&' if '?' in dsn else '?'}{name}={quote(value, safe='')}"


def with_defaults(dsn: str, defaults) -> str:
    """The DSN with each (name, value) of `defaults` it does not set itself."""
    for name, value in defaults:
        if not has_param(dsn, name):
            dsn = with_param(dsn, name, value)
    return dsn
