"""What every loopback agent proxy shares (the Claude Code and Codex adapters).

- ``server``: HTTP on 127.0.0.1 with the per-launch secret path segment (else 404); every
  request forwarded unchanged, the response (SSE included) streamed back as it arrives, except
  what the agent's :class:`ProxyAdapter` answers or edits. Credentials pass through, kept in
  memory only; nothing is logged; anything of ours that fails falls back to the original bytes.
- ``session``: one proxy session for every agent (``ProxySession``): registration, the daemon's
  config view, cache boundaries, the mask request and its check, aux runs, a call's stats,
  shutdown, and the request path's skeleton ("decide at the tail"); an adapter's session
  overrides its few hooks.
- ``agent_proxy``: ``AgentProxy``, the sessions, credentials and call records of one proxy.
- ``wire``: the wire contract (``Wire``) both wire modules implement, and the types they share
  (``Neutral``, ``BodySize``, ``Usage``).
- ``frozen``: a session's frozen edit set and its append-only file, and the conversations'
  prompt-cache state file (``$XDG_STATE_HOME/ctxwrap/<agent>/<session>.jsonl`` and
  ``….cache.json``, 0600).
- ``cache_state``: when a request is cold (TTL, model, tools/system) and which masks are safe.
- ``daemon_link``: the daemon calls, each with a deadline, failing open.
- ``in_step``: compaction in step with plain — a response's usage reported at plain's size
  where plain would have compacted (the adapter reads and patches its own wire format).
- ``body_encoding``: request bodies an agent compresses (Codex with a ChatGPT login: zstd),
  decoded to be read and encoded again as they came.

Nothing here knows a wire format: each adapter's wire module converts its API's body to the
neutral messages of ``ctxwrap.engine`` and applies the frozen edits back itself (``Wire``).
"""

from __future__ import annotations

from ctxwrap.agents._proxy import body_encoding as body_encoding
from ctxwrap.agents._proxy import cache_state as cache_state
from ctxwrap.agents._proxy.daemon_link import DaemonLink as DaemonLink
from ctxwrap.agents._proxy.frozen import FrozenEdits as FrozenEdits
from ctxwrap.agents._proxy.frozen import load_cache_states as load_cache_states
from ctxwrap.agents._proxy.frozen import save_cache_states as save_cache_states
from ctxwrap.agents._proxy.server import HOP_BY_HOP as HOP_BY_HOP
from ctxwrap.agents._proxy.server import Exchange as Exchange
from ctxwrap.agents._proxy.server import LoopbackProxy as LoopbackProxy
from ctxwrap.agents._proxy.server import ProxyAdapter as ProxyAdapter
from ctxwrap.agents._proxy.server import ResponseTap as ResponseTap
from ctxwrap.agents._proxy.server import in_background as in_background
from ctxwrap.agents._proxy.server import read_body as read_body
