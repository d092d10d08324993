"""HTTP routes: parse a protocol model, call the Daemon, serialise the reply. Nothing else.

Bad input always gets a 4xx with a reason (malformed JSON, nesting too deep, unknown fields,
out-of-range numbers, oversize body, truncated request, an unknown session, an invalid recall
pattern) and never takes the daemon down; a 500 only ever means a bug.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ctxwrap import protocol as P
from ctxwrap.daemon.service import Daemon, RequestRefused

log = logging.getLogger("ctxwrap.daemon")
M = TypeVar("M", bound=BaseModel)


class BadRequest(Exception):
    def __init__(self, status: int, error: str, detail: str | None = None) -> None:
        super().__init__(error)
        self.status, self.error, self.detail = status, error, detail


async def _read_body(request: Request) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > P.MAX_BODY_BYTES:
        raise BadRequest(413, "body too large", f"{declared} bytes > {P.MAX_BODY_BYTES}")
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > P.MAX_BODY_BYTES:
                raise BadRequest(413, "body too large", f"more than {P.MAX_BODY_BYTES} bytes")
            chunks.append(chunk)
    except ClientDisconnect as exc:
        raise BadRequest(400, "truncated request") from exc
    return b"".join(chunks)


# JSON may carry lone UTF-16 surrogates (a model's write content, say): legal in JS strings,
# unencodable in UTF-8, so a reply or a row holding one would fail. Replaced at the door.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _replace_lone_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, list):
        return [_replace_lone_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_replace_lone_surrogates(k): _replace_lone_surrogates(v) for k, v in value.items()}
    return value


def _check_depth(data: Any) -> None:
    """Refuse JSON nested deeper than MAX_JSON_DEPTH, without recursing ourselves."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > P.MAX_JSON_DEPTH:
            raise BadRequest(400, "malformed JSON", f"nested deeper than {P.MAX_JSON_DEPTH}")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values() if isinstance(v, dict | list))
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value if isinstance(v, dict | list))


async def _parse(request: Request, model: type[M]) -> M:
    body = await _read_body(request)
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(400, "malformed JSON", str(exc)[:200]) from exc
    except RecursionError as exc:  # the C decoder's own guard, far below a stack overflow
        raise BadRequest(400, "malformed JSON", f"nested deeper than {P.MAX_JSON_DEPTH}") from exc
    _check_depth(data)
    if _SURROGATE_ESCAPE.search(body):
        data = _replace_lone_surrogates(data)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or "(body)"
        # The message names the field, never echoes the value (it may be a secret).
        raise BadRequest(422, "invalid request", f"{loc}: {first['msg']}") from exc


def _json(model: BaseModel, status: int = 200) -> Response:
    return Response(
        model.model_dump_json(exclude_none=False), status_code=status, media_type="application/json"
    )


def build_app(daemon: Daemon) -> Any:
    def post(
        model: type[M], handler: Callable[[M], Awaitable[BaseModel | None] | BaseModel | None]
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                req = await _parse(request, model)
                result = handler(req)
                if hasattr(result, "__await__"):
                    result = await result  # type: ignore[misc]
            except (BadRequest, RequestRefused) as exc:
                return _json(P.ErrorReply(error=exc.error, detail=exc.detail), exc.status)
            except Exception as exc:  # a bug in one handler must not take the daemon down
                log.exception("handler failed")
                return _json(P.ErrorReply(error="internal error", detail=type(exc).__name__), 500)
            if result is None:
                return _json(P.ErrorReply(error="not found"), 404)
            return _json(result)

        return endpoint

    def guarded(
        handler: Callable[[Request], Awaitable[Response]],
    ) -> Callable[[Request], Awaitable[Response]]:
        """GET routes: a bug still answers the documented JSON error, not a plain-text 500."""

        async def endpoint(request: Request) -> Response:
            try:
                return await handler(request)
            except (BadRequest, RequestRefused) as exc:
                return _json(P.ErrorReply(error=exc.error, detail=exc.detail), exc.status)
            except Exception as exc:
                log.exception("handler failed")
                return _json(P.ErrorReply(error="internal error", detail=type(exc).__name__), 500)

        return endpoint

    async def health(request: Request) -> Response:
        return _json(daemon.health())

    async def sessions(request: Request) -> Response:
        daemon.reap_dead_sessions()
        rows = daemon.store.query("SELECT * FROM sessions ORDER BY started_at DESC LIMIT 200")
        live = set(daemon.sessions)
        out = [
            P.SessionInfo(
                session_id=r["session_id"],
                session_file=r["session_file"],
                cwd=r["cwd"],
                pid=r["pid"],
                pi_version=r["pi_version"],
                model=r["model"],
                started_at=r["started_at"],
                ended_at=r["ended_at"],
                live=r["session_id"] in live,
            )
            for r in rows
        ]
        return _json(P.SessionList(sessions=out))

    async def facts(request: Request) -> Response:
        return _json(daemon.facts(request.query_params.get("session")))

    async def stats(request: Request) -> Response:
        """One session's breakdown as text, for /ctx-stats inside pi."""
        from ctxwrap.stats.compute import compute_stats, with_cause
        from ctxwrap.stats.render import render_text

        session = request.query_params.get("session")
        width_arg = request.query_params.get("width", "100")
        if not width_arg.isascii() or not width_arg.isdigit() or not 20 <= int(width_arg) <= 1000:
            raise BadRequest(422, "invalid request", "width: an integer from 20 to 1000")
        from ctxwrap.mechanisms.cost_accounting import settings_overrides

        try:
            # views: the daemon's own price settings, as the totals and `ctxwrap stats` use
            prices = settings_overrides(daemon.cfg.prices)
            ttl_s = daemon.cfg.cache_ttl_s
            report = compute_stats(daemon.store.conn, session=session, ttl_s=ttl_s, prices=prices)
            # why it cost more, as `ctxwrap stats --session` says it (asked by /ctx-stats only)
            report = with_cause(daemon.store.conn, report, ttl_s=ttl_s, prices=prices)
        except Exception as exc:  # unknown session id and the like
            return _json(P.ErrorReply(error="no statistics", detail=str(exc)[:200]), 404)
        text = render_text(report, color=False, width=int(width_arg))
        return _json(
            P.StatsText(text=text, totals=daemon.session_totals(session) if session else None)
        )

    async def shutdown(request: Request) -> Response:
        stop = getattr(request.app.state, "request_stop", None)
        if stop is not None:
            stop()
        return _json(P.Ack())

    async def not_found(request: Request, exc: Any) -> Response:
        return JSONResponse({"error": "not found", "detail": request.url.path}, status_code=404)

    routes = [
        Route("/v1/health", guarded(health), methods=["GET"]),
        Route("/v1/sessions", guarded(sessions), methods=["GET"]),
        Route("/v1/facts", guarded(facts), methods=["GET"]),
        Route("/v1/stats", guarded(stats), methods=["GET"]),
        Route("/v1/shutdown", shutdown, methods=["POST"]),
        Route("/v1/sessions/start", post(P.SessionStart, daemon.session_start), methods=["POST"]),
        Route(
            "/v1/sessions/shutdown",
            post(P.SessionShutdown, daemon.session_shutdown),
            methods=["POST"],
        ),
        Route("/v1/sessions/model", post(P.ModelSelect, daemon.model_select), methods=["POST"]),
        Route("/v1/prompt", post(P.PromptStart, daemon.prompt_start), methods=["POST"]),
        Route("/v1/tool_result", post(P.ToolResult, daemon.tool_result), methods=["POST"]),
        Route("/v1/tag_batch", post(P.TagBatch, daemon.tag_batch), methods=["POST"]),
        Route("/v1/aux/result", post(P.AuxResult, daemon.aux_result), methods=["POST"]),
        Route("/v1/context", post(P.ContextRequest, daemon.context), methods=["POST"]),
        Route("/v1/turn_end", post(P.TurnEnd, daemon.turn_end), methods=["POST"]),
        Route("/v1/llm_call", post(P.LlmCall, daemon.llm_call), methods=["POST"]),
        Route("/v1/failed_try", post(P.FailedTry, daemon.failed_try), methods=["POST"]),
        Route("/v1/compaction", post(P.Compaction, daemon.compaction), methods=["POST"]),
        Route("/v1/catalog", post(P.CatalogUpdate, daemon.catalog_update), methods=["POST"]),
        Route("/v1/recall", post(P.RecallRequest, daemon.recall), methods=["POST"]),
        Route(
            "/v1/capabilities/search",
            post(P.CapabilitySearch, daemon.capabilities),
            methods=["POST"],
        ),
    ]
    app = Starlette(routes=routes, exception_handlers={404: not_found, 405: not_found})
    instance = f"{os.getpid()}-{daemon.started:.6f}"

    async def with_instance(scope: Any, receive: Any, send: Any) -> None:
        # Lets a bridge notice a restarted daemon and register its session again.
        async def send_wrapper(message: Any) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [
                    *message.get("headers", []),
                    (b"x-ctxwrap-instance", instance.encode()),
                ]
            await send(message)

        await app(scope, receive, send_wrapper)

    wrapped: Any = with_instance
    wrapped.state = app.state
    return wrapped
