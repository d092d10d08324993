"""Secret redaction applied to anything ctxwrap stores or sends to an aux model.

Each secret is replaced by ``[REDACTED:<kind>]``; for ``NAME=value`` assignments the name
stays, so the reader still knows which setting was there.

The pattern set is Yelp's detect-secrets (1.5), used through its plugin API, not copied:

- every ``RegexBasedDetector`` plugin's ``denylist`` (AWS key ids and quoted AWS secrets,
  GitHub, GitLab, Slack, Stripe, SendGrid, Twilio, Square, PyPI, npm, Discord, Telegram,
  Mailchimp, Artifactory, Azure storage, Cloudant, IBM, SoftLayer, OpenAI, JWT, URL
  credentials, private-key headers). Where a group captures the secret inside its context
  (``://user:PASS@``, ``_authToken=…``, ``cloudant_password = '…'``) only the group is
  replaced; a JWT must pass the plugin's ``is_formally_valid``;
- ``KeywordDetector`` with its quotes-required table (``password = "…"``, ``api_key: '…'``);
- ``Base64HighEntropyString`` (quoted strings, the plugin's 4.5 bit limit).

Left out on purpose: ``IPPublicDetector`` (an address is not a secret, and logs are full of
them) and ``HexHighEntropyString`` (git SHAs and content hashes are hex: the git digester
needs them).

ctxwrap adds what a scanner of committed code does not need but tool output does:

- the whole PEM block, not just its BEGIN line (also a block cut at either end);
- provider keys detect-secrets 1.5 does not know: ``sk-…`` / ``sk-proj-…`` without
  OpenAI's marker, Anthropic ``sk-ant-…``, ``github_pat_…``, Google ``AIza…``,
  ``Bearer …`` headers, Slack tokens of any shape;
- unquoted ``NAME=value`` / ``name: value`` where the name says secret (env files, ``env``
  output): detect-secrets' config-file rule takes the rest of the line, ours stops at the
  value and leaves ``None``, ``$VAR`` and friends alone;
- **bare high-entropy tokens** (an AWS secret access key printed on its own, no name before
  it). The rule, for a run of standard base64 characters ``[A-Za-z0-9+/]`` (``=`` padding
  allowed) of at least 32 characters:

  - not all hex digits: 40-character git SHAs, sha256 digests and the like always survive;
  - mixes upper case, lower case and digits;
  - not a path (below);
  - not an identifier: less than 70 % of it in words (``[A-Z]?[a-z]{3,}``), which keeps
    ``findVisualStudio2019OrNewerFromSpecifiedLocation``;
  - Shannon entropy (the Base64 plugin's measure) above 3.5 bits per character.

  Over 5,000 random 40-character base64 strings 0.2 % escape it (the word and path tests);
  over 35 MB of Python and JavaScript sources and the captured outputs it fires three times,
  each on a string that is random (a test fixture, a wasm blob). URL-safe tokens (``-_``)
  are left to the named formats, assignments and quoted-entropy rules. Integrity hashes of
  public artifacts (``sha512-…``, ``h1:…``) are kept.

**What is not a secret.** A log is read for its paths, flags and names; on 36 real CI logs
(``../shared/realdata``) the only redaction is the one credential there. A run (bare, or a
quoted string the Base64 plugin measures) is a *path* when two or more of its ``/`` or backslash
segments of three or more characters were named by a person, and there are no more runs of
unnamed segments than named ones (a base64 blob holds ``/`` too, but few of its segments look
named). A segment is named when each of its ``-_.`` parts is short (≤ 4), has no upper case
(``stm32h7xx``, a temp dir), is upper-case letters (``SPIRV``) or is mostly words
(``MsgHandler``). In a path only a run of adjacent unnamed segments of 16 or more characters
that passes the tests above goes (``/run/creds/<key>/token.json`` keeps everything but the
key; a key holding ``/`` is judged whole). A quoted UUID or hex digest is kept. In the
``NAME=value`` rule the value is kept when it is a mask CI already printed (``***``,
``[secure]``), the name of the variable holding the secret (``server-password:
GITHUB_TOKEN``), a call (``grant_token = JWTGrantToken(jwt)``), or a lower-case word that
prose continues (``reset password: invalid token``).

Speed: redaction runs over whole 64 KB blocks of 40,000-line outputs, and Python's regex
engine is slow on patterns that start with a character class. So no detect-secrets regex
runs over a whole block: one C-speed pass per gate finds the lines that can hold a secret,
and only those lines meet the patterns that gate allows. A gate is a literal every match of
a rule contains (``ghp_``, ``AKIA``, ``eyJ``, ``://``, a secret-sounding word …), or, for
rules without one (Discord, Telegram, Twilio, Artifactory, the entropy rules), a run of at
least 23 base64 characters that mixes upper case, lower case and digits or stands in quotes
(found with ``bytes.translate`` and ``bytes.find``). Every pattern is line-local, as in
detect-secrets, which scans line by line; PEM blocks are the one multi-line rule and run on
the whole text. ``bench/redact.py`` measures it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

_PEM_BLOCK = re.compile(
    r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY(?: BLOCK)?-----"
    r"(?:\r?\n[A-Za-z0-9+/=:,\- ]*)*?"
    r"(?:\r?\n-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
    r"|(?=\r?\n[^A-Za-z0-9+/=:,\- \r\n])|\Z)"
)
# The end of a key whose BEGIN line was cut off (a digest kept only the tail).
_PEM_TAIL = re.compile(
    r"(?:^[A-Za-z0-9+/=]{16,}\r?\n)+-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----", re.M
)

# Secret-sounding words (lower case): a line without one cannot hold a keyword assignment,
# ours or detect-secrets' (whose keyword, AWS-secret, Cloudant, IBM and SoftLayer rules all
# name one of key/pwd/pass/password/token/secret/contraseña; their bare ``pw`` is left to
# the run gate, since a two-letter needle costs a slow pass over every block).
# One regex pass over the lower-cased bytes is faster than a find per word.
_SECRET_WORDS = re.compile(rb"key|pass|pwd|token|secret|contrase|credential")
# NAME=value, NAME: value, "name": "value" where the name says it holds a secret.
_ASSIGNMENT = re.compile(
    r"""(?P<name>\b[A-Za-z0-9_.\-]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|PWD|CREDENTIALS?)\b"""
    r"""|\b[A-Za-z0-9_.\-]*(?:api[_\-]?key|access[_\-]?key|secret|token|password|passwd))"""
    r"""(?P<sep>["']?\s*[=:]\s*)(?P<quote>["']?)(?P<value>(?!\$|\[REDACTED|(?:None|null|nil|true|false|undefined|True|False)\b)[^\s"',;]{2,}[^\s"',;(){}<>|&])""",
)

_BASE64_CHARS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-="
# Every byte of the Base64 plugin's charset → "a", everything else (newline, non-ASCII) → " ".
_RUN_MAP = bytes(0x61 if b in _BASE64_CHARS else 0x20 for b in range(256))
# No string under 23 characters passes 4.5 bits of entropy; shorter token formats (AWS key
# ids, JWT headers, bearer tokens) have literal gates of their own in _LINE_LITERALS.
_RUN_MIN = 23
_RUN = b"a" * _RUN_MIN
_DIGITS = b"0123456789"
_BARE_TOKEN = re.compile(r"(?<![A-Za-z0-9+/=])[A-Za-z0-9+/]{32,}={0,2}(?![A-Za-z0-9+/=])")
_WORD = re.compile(r"[A-Z]?[a-z]{3,}")
BARE_ENTROPY_LIMIT = 3.5
BARE_WORDINESS_LIMIT = 0.7
# Paths: segments between / or \, parts of a segment between - _ .
_SEGMENT = re.compile(r"[^/\\]+")
_PART_SPLIT = re.compile(r"[-_.]")
SEGMENT_WORDINESS = BARE_WORDINESS_LIMIT
SEGMENT_SECRET_MIN = 16  # a random segment this long inside a path is redacted alone
_HEX = re.compile(r"[0-9a-fA-F]+")
_PUBLIC_HASH_PREFIXES = ("sha1-", "sha256-", "sha384-", "sha512-", "h1:")
ENTROPY_LIMIT = 4.5
_MARK = "[REDACTED"
RUN_GATE = "<run>"  # gate of rules whose matches carry no literal: a mixed base64 run


@dataclass(frozen=True)
class _Rule:
    """Patterns of one kind of secret, tried on the lines where one of `gates` occurs."""

    kind: str
    patterns: tuple[re.Pattern[str], ...]
    gates: tuple[str, ...]
    fold: bool = False  # gates are lower case, looked for in the lower-cased text
    valid: Any = None  # a plugin's check of a match (JWT: is_formally_valid)
    groups_are_secret: bool = False  # else a group is a prefix alternation: take the match
    whole_token: bool = False  # extend a match to the end of the token (JWT signatures)


# detect-secrets plugin class name → (our kind, gates, fold). A gate is a literal every
# match of the plugin's token-shaped denylist regexes contains, or RUN_GATE.
_PLUGIN_GATES: dict[str, tuple[str, tuple[str, ...], bool]] = {
    "AWSKeyDetector": ("aws-access-key", ("A3T", "ABIA", "ACCA", "AKIA", "ASIA"), False),
    "ArtifactoryDetector": ("artifactory-token", ("AKC", RUN_GATE), False),
    "AzureStorageKeyDetector": ("azure-storage-key", ("AccountKey=",), False),
    "BasicAuthDetector": ("url-password", ("://",), False),
    "DiscordBotTokenDetector": ("discord-token", (RUN_GATE,), False),
    "GitHubTokenDetector": ("github-token", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), False),
    "GitLabTokenDetector": (
        "gitlab-token",
        (
            "glpat-",
            "gldt-",
            "glft-",
            "glsoat-",
            "glrt-",
            "GR1348941",
            "glcbt-",
            "glimt-",
            "glptt-",
            "glagent-",
            "gloas-",
        ),
        False,
    ),
    "JwtTokenDetector": ("jwt", ("eyJ",), False),
    "MailchimpDetector": ("mailchimp-key", ("-us",), False),
    "NpmDetector": ("npm-token", ("_authToken",), False),
    "OpenAIDetector": ("api-key", ("T3BlbkFJ",), False),
    "PrivateKeyDetector": ("private-key", ("PRIVATE KEY", "PuTTY"), False),
    "PypiTokenDetector": ("pypi-token", ("pypi-",), False),
    "SendGridDetector": ("sendgrid-key", ("SG.",), False),
    "SlackDetector": ("slack-token", ("xox", "hooks.slack.com"), True),
    "SoftlayerDetector": ("softlayer-key", ("api.softlayer.com",), True),
    "CloudantDetector": ("cloudant-password", ("cloudant.com",), True),
    "SquareOAuthDetector": ("square-secret", ("sq0csp-",), False),
    "TelegramBotTokenDetector": ("telegram-token", (RUN_GATE,), False),
    "TwilioKeyDetector": ("twilio-key", (RUN_GATE,), False),
}
# Plugins whose regex groups capture the secret inside some context (``://user:PASS@``);
# elsewhere a group is just an alternation (``(ghp|gho)_…``) and the whole match is secret.
_GROUP_IS_SECRET = {"BasicAuthDetector", "NpmDetector", "CloudantDetector", "SoftlayerDetector"}
# Assignment-shaped denylist regexes (``<prefix>key = "value"``): tried on lines holding a
# secret-sounding word. The same plugins' URL-shaped regexes are token rules above.
_LINE_PLUGINS = {
    "AWSKeyDetector": "aws-secret-key",
    "CloudantDetector": "cloudant-password",
    "IbmCloudIamDetector": "ibm-cloud-key",
    "IbmCosHmacDetector": "ibm-cos-key",
    "SoftlayerDetector": "softlayer-key",
}

# Ours: provider keys detect-secrets 1.5 does not cover (see the module docstring).
_OWN_TOKENS: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("sk-",), r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{16,}", "api-key"),
    (("github_pat_",), r"\bgithub_pat_[A-Za-z0-9_]{30,}", "github-token"),
    (("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), r"\bgh[pousr]_[A-Za-z0-9]{30,}", "github-token"),
    (("xox",), r"\bxox[abposr]-[A-Za-z0-9\-]{10,}", "slack-token"),
    (("glpat-",), r"\bglpat-[A-Za-z0-9_\-]{20,}", "gitlab-token"),
    (("AIza",), r"\bAIza[0-9A-Za-z_\-]{35}\b", "google-api-key"),
    # detect-secrets' Stripe rule takes 24 characters; today's keys run to 100 or more, and the
    # rest of one was left in the text
    (("k_live_", "k_test_"), r"\b[rs]k_(?:live|test)_[0-9A-Za-z]{16,}", "stripe-key"),
    (("earer ",), r"(?<=[Bb]earer )[A-Za-z0-9._~+/\-]{12,}=*", "bearer-token"),
)


def _is_assignment_regex(pattern: re.Pattern[str]) -> bool:
    # build_assignment_regex() patterns start with this lookbehind; the URL-shaped ones don't.
    return pattern.pattern.startswith(r"(?:(?<=\W)|(?<=^))") or pattern.pattern.startswith("aws")


@functools.cache
def _plugins() -> dict[str, Any]:
    # Imported on first use: detect-secrets pulls in requests (~0.2 s), which CLI commands
    # that never redact should not pay for. Named one by one, not discovered: a plugin added
    # by a later detect-secrets release gets a gate here before it runs over every block.
    from detect_secrets.plugins.artifactory import ArtifactoryDetector
    from detect_secrets.plugins.aws import AWSKeyDetector
    from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
    from detect_secrets.plugins.basic_auth import BasicAuthDetector
    from detect_secrets.plugins.cloudant import CloudantDetector
    from detect_secrets.plugins.discord import DiscordBotTokenDetector
    from detect_secrets.plugins.github_token import GitHubTokenDetector
    from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
    from detect_secrets.plugins.ibm_cloud_iam import IbmCloudIamDetector
    from detect_secrets.plugins.ibm_cos_hmac import IbmCosHmacDetector
    from detect_secrets.plugins.jwt import JwtTokenDetector
    from detect_secrets.plugins.mailchimp import MailchimpDetector
    from detect_secrets.plugins.npm import NpmDetector
    from detect_secrets.plugins.openai import OpenAIDetector
    from detect_secrets.plugins.private_key import PrivateKeyDetector
    from detect_secrets.plugins.pypi_token import PypiTokenDetector
    from detect_secrets.plugins.sendgrid import SendGridDetector
    from detect_secrets.plugins.slack import SlackDetector
    from detect_secrets.plugins.softlayer import SoftlayerDetector
    from detect_secrets.plugins.square_oauth import SquareOAuthDetector
    from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
    from detect_secrets.plugins.twilio import TwilioKeyDetector

    classes: list[Any] = [
        ArtifactoryDetector,
        AWSKeyDetector,
        AzureStorageKeyDetector,
        BasicAuthDetector,
        CloudantDetector,
        DiscordBotTokenDetector,
        GitHubTokenDetector,
        GitLabTokenDetector,
        IbmCloudIamDetector,
        IbmCosHmacDetector,
        JwtTokenDetector,
        MailchimpDetector,
        NpmDetector,
        OpenAIDetector,
        PrivateKeyDetector,
        PypiTokenDetector,
        SendGridDetector,
        SlackDetector,
        SoftlayerDetector,
        SquareOAuthDetector,
        TelegramBotTokenDetector,
        TwilioKeyDetector,
    ]
    return {cls.__name__: cls for cls in classes}


@functools.cache
def _token_rules() -> tuple[_Rule, ...]:
    plugins = _plugins()
    rules: list[_Rule] = []
    for name, (kind, gates, fold) in _PLUGIN_GATES.items():
        cls = plugins[name]
        patterns = tuple(p for p in cls.denylist if not _is_assignment_regex(p))
        if patterns:
            valid = getattr(cls, "is_formally_valid", None)
            rules.append(
                _Rule(
                    kind,
                    patterns,
                    gates,
                    fold,
                    valid,
                    groups_are_secret=name in _GROUP_IS_SECRET,
                    whole_token=name == "JwtTokenDetector",
                )
            )
    for gates, pattern, kind in _OWN_TOKENS:
        rules.append(_Rule(kind, (re.compile(pattern),), gates))
    return tuple(rules)


@functools.cache
def _line_rules() -> tuple[tuple[str, re.Pattern[str]], ...]:
    plugins = _plugins()
    return tuple(
        (kind, pattern)
        for name, kind in _LINE_PLUGINS.items()
        for pattern in plugins[name].denylist
        if _is_assignment_regex(pattern)
    )


_WORDS_BIT, _RUN_BIT, _LITERAL_BIT = 1, 2, 4
# Literals that need a pass of their own: their secrets need not sit in a long base64 run.
_LINE_LITERALS = (b"PRIVATE KEY", b"PuTTY", b"earer ", b"eyJ")
# AWS key ids and Artifactory keys; a regex with one literal first byte runs at memchr speed.
_A_LITERALS = re.compile(rb"A(?:KIA|SIA|BIA|CCA|3T|KC)")


@functools.cache
def _run_gates() -> re.Pattern[bytes]:
    """Literal gates that can sit inside a base64 run, for runs that are not mixed."""
    literals = {
        variant
        for rule in _token_rules()
        for gate in rule.gates
        if gate != RUN_GATE and all(ord(c) in _BASE64_CHARS for c in gate)
        for variant in ({gate, gate.upper()} if rule.fold else {gate})
    }
    return re.compile("|".join(re.escape(g) for g in sorted(literals)).encode())


@functools.cache
def _keyword_detector() -> Any:
    from detect_secrets.plugins.keyword import KeywordDetector

    return KeywordDetector()


@functools.cache
def _entropy_plugin() -> Any:
    from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString

    return Base64HighEntropyString(limit=ENTROPY_LIMIT)


def _spans(match: re.Match[str]) -> list[tuple[int, int]]:
    """What a plugin reports of a match: its non-empty groups, else the match itself."""
    groups = [match.span(i) for i in range(1, match.re.groups + 1)]
    spans = sorted((a, b) for a, b in groups if a >= 0 and b > a)
    if not spans:
        return [match.span()]
    merged: list[tuple[int, int]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    return merged


# Delimiters a group-less match may take on either side (Artifactory's ``(?:\s|=|:|"|^)``).
_LEAD = " \t\"'=:"
_TRAIL = " \t\"'"
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.+/=")


def _replace(text: str, spans: list[tuple[int, int, str]]) -> str:
    out: list[str] = []
    last = 0
    for a, b, kind in sorted(spans):
        if b <= last:  # inside what an earlier span already replaced
            continue
        out.append(text[last : max(a, last)])
        out.append(f"[REDACTED:{kind}]")
        last = b
    out.append(text[last:])
    return "".join(out)


# A JWT starts a token. Trying detect-secrets' JWT regex only there keeps it linear: run
# anywhere, "eyJeyJeyJ…" (no dot) costs a scan to the run's end from every "eyJ".
_JWT_START = re.compile(r"(?<![A-Za-z0-9_\-])eyJ")


def _matches(line: str, rule: _Rule, pattern: re.Pattern[str]) -> Iterator[re.Match[str]]:
    if not rule.whole_token:
        yield from pattern.finditer(line)
        return
    for start in _JWT_START.finditer(line):
        match = pattern.match(line, start.start())
        if match is not None:
            yield match


def _apply_rule(line: str, rule: _Rule) -> str:
    found: list[tuple[int, int, str]] = []
    for pattern in rule.patterns:
        for match in _matches(line, rule, pattern):
            if rule.valid is not None and not rule.valid(match.group()):
                continue
            for a, b in _spans(match) if rule.groups_are_secret else [match.span()]:
                # A group-less match may include the delimiters around the secret.
                while a < b and line[a] in _LEAD:
                    a += 1
                while b > a and line[b - 1] in _TRAIL:
                    b -= 1
                if rule.whole_token:
                    while b < len(line) and line[b] in _TOKEN_CHARS:
                        b += 1
                if b > a and _MARK not in line[a:b]:
                    found.append((a, b, rule.kind))
    return _replace(line, found) if found else line


# Values in a secret's place that are not secrets (see "What is not a secret" above): masks CI
# already printed, the name of the variable that holds the secret, a call, a word of prose.
_MASK_VALUE = re.compile(
    r"\*{3,}|x{3,}|X{3,}|[\[<](?:secure|redacted|hidden|masked|filtered|secret)[\]>]", re.I
)
_VARIABLE_NAME = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
_SECRET_NAME_WORD = re.compile(r"KEY|TOKEN|SECRET|PASS|PWD|CREDENTIAL")
_CALL = re.compile(r"[A-Za-z_][\w.]*\(")
_PROSE_WORD = re.compile(r"[a-z]+")


def _not_a_secret_value(match: re.Match[str]) -> bool:
    value = match["value"]
    if _MASK_VALUE.fullmatch(value) or _CALL.match(value):
        return True
    if _VARIABLE_NAME.fullmatch(value) and _SECRET_NAME_WORD.search(value):
        return True  # setup-java's `server-password: GITHUB_TOKEN` names a variable
    # "reset password: invalid token": an unquoted lower-case word followed by more words.
    rest = match.string[match.end() : match.end() + 2]
    return (
        not match["quote"]
        and ":" in match["sep"]
        and _PROSE_WORD.fullmatch(value) is not None
        and len(rest) == 2
        and rest[0] == " "
        and rest[1].isalpha()
    )


def _assignment(match: re.Match[str]) -> str:
    if _not_a_secret_value(match):
        return match.group(0)
    return f"{match['name']}{match['sep']}{match['quote']}[REDACTED:secret]"


def _redact_assignments(line: str) -> str:
    found: list[tuple[int, int, str]] = []
    for kind, pattern in _line_rules():
        for match in pattern.finditer(line):
            found.extend((a, b, kind) for a, b in _spans(match))
    for value in _keyword_detector().analyze_string(line):
        if value and _MARK not in value:
            start = line.find(value)
            while start >= 0:
                found.append((start, start + len(value), "secret"))
                start = line.find(value, start + len(value))
    if found:
        line = _replace(line, found)
    return _ASSIGNMENT.sub(_assignment, line)


def _mixed(token: bytes) -> bool:
    return (
        token.lower() != token
        and token.upper() != token
        and len(token.translate(None, _DIGITS)) < len(token)
    )


def _entropy(text: str) -> float:
    value: float = _entropy_plugin().calculate_shannon_entropy(text)
    return value


def _random_shaped(core: str, min_len: int) -> bool:
    """Long enough, not hex, mixes cases and digits, not made of words."""
    if len(core) < min_len or _HEX.fullmatch(core) or not _mixed(core.encode()):
        return False
    return sum(len(w) for w in _WORD.findall(core)) < BARE_WORDINESS_LIMIT * len(core)


def _wordlike_segment(segment: str) -> bool:
    """A path segment a person named: every ``-_.``-separated part is short, without upper
    case (``stm32h7xx``, a temp dir), upper-case letters (``SPIRV``), or mostly words
    (``MsgHandler``)."""
    for part in _PART_SPLIT.split(segment):
        if len(part) <= 4 or part.lower() == part or (part.isupper() and part.isalpha()):
            continue
        if "+" in part or sum(len(w) for w in _WORD.findall(part)) < SEGMENT_WORDINESS * len(part):
            return False
    return True


def _path_segments(token: str) -> list[tuple[int, int]] | None:
    """The segments of `token` when it is a path: two or more segments of three or more
    characters that a person named, and no more runs of unnamed segments than named ones
    (a base64 blob holds ``/`` too, but few of its segments look named). Else None."""
    if "/" not in token and "\\" not in token:
        return None
    segments = [m.span() for m in _SEGMENT.finditer(token)]
    named = unnamed_runs = 0
    previous_named = True
    for a, b in segments:
        is_named = _wordlike_segment(token[a:b])
        named += is_named and b - a >= 3
        unnamed_runs += not is_named and previous_named
        previous_named = is_named
    return segments if named >= 2 and named >= unnamed_runs else None


def _path_secret_spans(token: str, segments: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """A key inside a path (``/run/creds/<key>/file``): only the random part goes. Adjacent
    segments nobody named are judged together: a base64 key may hold ``/`` itself."""
    runs: list[tuple[int, int]] = []
    for a, b in segments:
        if _wordlike_segment(token[a:b]):
            continue
        if runs and a == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], b)
        else:
            runs.append((a, b))
    return [
        (a, b)
        for a, b in runs
        if _random_shaped(token[a:b], SEGMENT_SECRET_MIN)
        and _entropy(token[a:b]) > BARE_ENTROPY_LIMIT
    ]


def is_high_entropy_token(token: str) -> bool:
    """The bare-token rule of the module docstring, for one run of base64 characters."""
    core = token.rstrip("=")
    if not _random_shaped(core, 32) or _path_segments(core) is not None:
        return False
    return _entropy(core) > BARE_ENTROPY_LIMIT


def _token_spans(token: str, bare: bool) -> list[tuple[int, int]]:
    """Spans of `token` (a bare base64 run, or a quoted string's value) that are secret."""
    core = token.rstrip("=")
    segments = _path_segments(core)
    if segments is not None:
        return _path_secret_spans(core, segments)
    if bare:
        return [(0, len(token))] if is_high_entropy_token(token) else []
    # A quoted value: detect-secrets' Base64 measure, minus hex digests and UUIDs.
    if all(_HEX.fullmatch(part) for part in core.split("-") if part):
        return []
    return [(0, len(token))] if _entropy(token) > ENTROPY_LIMIT else []


def _redact_high_entropy(line: str) -> str:
    found: list[tuple[int, int, str]] = []
    for match in _BARE_TOKEN.finditer(line):
        a = match.start()
        if line.endswith(_PUBLIC_HASH_PREFIXES, 0, a):
            continue
        found.extend((a + x, a + y, "high-entropy") for x, y in _token_spans(match.group(), True))
    # Quoted strings, as detect-secrets' Base64 plugin finds them.
    for match in _entropy_plugin().regex.finditer(line):
        value, a = match.group(2), match.start(2)
        if value.startswith(_PUBLIC_HASH_PREFIXES) or line.endswith(_PUBLIC_HASH_PREFIXES, 0, a):
            continue
        found.extend((a + x, a + y, "high-entropy") for x, y in _token_spans(value, False))
    return _replace(line, found) if found else line


# Longer lines are handled in pieces cut at a space: several detect-secrets regexes (and
# the keyword rules) backtrack over the rest of a line from every start, which is quadratic
# in its length. No secret they look for is this long.
_MAX_PIECE = 2048


def _redact_line(line: str, mask: int) -> str:
    if len(line) <= _MAX_PIECE:
        return _redact_piece(line, mask)
    pieces: list[str] = []
    start = 0
    while start < len(line):
        end = min(len(line), start + _MAX_PIECE)
        if end < len(line):
            space = line.rfind(" ", start + _MAX_PIECE // 2, end)
            end = space + 1 if space > 0 else end
        pieces.append(_redact_piece(line[start:end], mask))
        start = end
    return "".join(pieces)


@functools.cache
def _gate_index() -> tuple[re.Pattern[str], dict[str, tuple[int, ...]], tuple[int, ...]]:
    """One regex over a lower-cased line for every literal gate → the rules each opens."""
    table: dict[str, list[int]] = {}
    run_rules: list[int] = []
    for index, rule in enumerate(_token_rules()):
        for gate in rule.gates:
            if gate == RUN_GATE:
                run_rules.append(index)
            else:
                table.setdefault(gate.lower(), []).append(index)
    regex = re.compile("|".join(re.escape(g) for g in sorted(table, key=len, reverse=True)))
    return regex, {g: tuple(i) for g, i in table.items()}, tuple(run_rules)


def _redact_piece(line: str, mask: int) -> str:
    regex, table, run_rules = _gate_index()
    opened = {index for gate in set(regex.findall(line.lower())) for index in table[gate]}
    if mask & _RUN_BIT:
        opened.update(run_rules)
    rules = _token_rules()
    for index in sorted(opened):
        line = _apply_rule(line, rules[index])
    if mask & _WORDS_BIT:
        line = _redact_assignments(line)
    if mask & _RUN_BIT:
        line = _redact_high_entropy(line)
    return line


def _candidate_lines(raw: bytes) -> dict[int, int]:
    """Start of each line that may hold a secret → which rule families to try on it."""
    lines: dict[int, int] = {}

    def mark(pos: int, bit: int) -> int:
        start = raw.rfind(b"\n", 0, pos) + 1
        lines[start] = lines.get(start, 0) | bit
        end = raw.find(b"\n", pos)
        return len(raw) if end < 0 else end

    lowered = raw.lower()
    for regex, haystack, bit in (
        (_SECRET_WORDS, lowered, _WORDS_BIT),
        (_A_LITERALS, raw, _LITERAL_BIT),
    ):
        match = regex.search(haystack)
        while match is not None:
            match = regex.search(haystack, mark(match.start(), bit))
    for literal in _LINE_LITERALS:
        pos = raw.find(literal)
        while pos >= 0:
            pos = raw.find(literal, mark(pos, _LITERAL_BIT))
    pos = raw.find(b"://")
    while pos >= 0:
        end = raw.find(b"\n", pos)
        if raw.find(b"@", pos, None if end < 0 else end) >= 0:
            end = mark(pos, _LITERAL_BIT)
        pos = -1 if end < 0 else raw.find(b"://", end)
    runs = raw.translate(_RUN_MAP)
    gates = _run_gates()
    pos = runs.find(_RUN)
    while pos >= 0:
        end = runs.find(b" ", pos)
        end = len(raw) if end < 0 else end
        token = raw[pos:end]
        if (pos and raw[pos - 1] in b"'\"") or _mixed(token) or gates.search(token):
            end = mark(pos, _RUN_BIT)
        pos = runs.find(_RUN, end)
    return lines


def load_patterns() -> None:
    """Import detect-secrets and build the rules now (~0.3 s), not on the first redaction."""
    _token_rules()
    _line_rules()
    _keyword_detector()
    _entropy_plugin()


def redact_secrets(text: str) -> str:
    """Replace keys, tokens, passwords, private keys and high-entropy strings with a marker."""
    if "PRIVATE KEY" in text:
        text = _PEM_BLOCK.sub("[REDACTED:private-key]", text)
        text = _PEM_TAIL.sub("[REDACTED:private-key]", text)
    raw = text.encode("utf-8", "surrogatepass")
    candidates = _candidate_lines(raw)
    if not candidates:
        return text
    out: list[bytes] = []
    last = 0
    for start in sorted(candidates):
        end = raw.find(b"\n", start)
        end = len(raw) if end < 0 else end
        line = raw[start:end].decode("utf-8", "surrogatepass")
        redacted = _redact_line(line, candidates[start])
        if redacted != line:
            out.append(raw[last:start])
            out.append(redacted.encode("utf-8", "surrogatepass"))
            last = end
    if not out:
        return text
    out.append(raw[last:])
    return b"".join(out).decode("utf-8", "surrogatepass")
