"""Golden protocol frames (tests/fixtures/frames/) against the pydantic models of protocol.py.

The same files are read by tests/node/frames.test.ts for the bridge side, so a schema change
that is not made on both sides fails one of the two suites. Most frames were captured from a
real daemon driven through a session; reply frames are exactly what `app._json` serialises.
"""

from __future__ import annotations

import inspect
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from ctxwrap import protocol as P
from ctxwrap.daemon.app import build_app
from ctxwrap.engine.edits import (
    RemoveEdit,
    Tail,
    TailMessage,
    TailToolCall,
    decide_edits,
    describe_tail,
)

FRAMES_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "frames"
FRAME_KEYS = {"model", "direction", "route", "frame", "messages", "seen", "note"}
FRAMES = sorted(FRAMES_DIR.glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text(encoding="utf-8")))


def model_of(doc: dict[str, Any]) -> type[BaseModel]:
    model = getattr(P, doc["model"], None)
    assert isinstance(model, type) and issubclass(model, BaseModel), doc["model"]
    return model


class _StubDaemon:
    """Enough of a Daemon for build_app to wire its routes; no handler is ever called."""

    started = 0.0

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


def route_table() -> dict[str, type[BaseModel] | None]:
    """`"METHOD /path"` → the request model its handler parses (None: no body)."""
    wrapped = build_app(_StubDaemon())  # type: ignore[arg-type]
    app = inspect.getclosurevars(wrapped).nonlocals["app"]
    table: dict[str, type[BaseModel] | None] = {}
    for route in app.routes:
        model = inspect.getclosurevars(route.endpoint).nonlocals.get("model")
        for method in sorted(route.methods - {"HEAD"}):
            table[f"{method} {route.path}"] = model
    return table


def test_frames_exist() -> None:
    assert len(FRAMES) >= 20, FRAMES_DIR


@pytest.mark.parametrize("path", FRAMES, ids=lambda p: p.stem)
def test_frame_file_shape(path: Path) -> None:
    doc = load(path)
    assert set(doc) <= FRAME_KEYS, set(doc) - FRAME_KEYS
    assert doc["direction"] in ("bridge->daemon", "daemon->bridge")
    assert doc["model"] in P.__all__
    assert doc["route"] in route_table(), doc["route"]
    assert isinstance(doc["frame"], dict)
    if "messages" in doc or "seen" in doc:
        assert doc["model"] == "ContextRequest"


@pytest.mark.parametrize("path", FRAMES, ids=lambda p: p.stem)
def test_frame_round_trips_through_its_model(path: Path) -> None:
    doc = load(path)
    parsed = model_of(doc).model_validate(doc["frame"])
    # exclude_unset: what the frame carried comes back unchanged, nothing dropped or renamed
    # (Reply models ignore unknown keys, so a misspelt field would vanish here).
    assert parsed.model_dump(mode="json", exclude_unset=True) == doc["frame"]


@pytest.mark.parametrize(
    "path", [p for p in FRAMES if load(p)["direction"] == "daemon->bridge"], ids=lambda p: p.stem
)
def test_reply_frame_is_what_the_daemon_serialises(path: Path) -> None:
    doc = load(path)
    parsed = model_of(doc).model_validate(doc["frame"])
    # app._json dumps with exclude_none=False: every field is on the wire, nulls included.
    assert json.loads(parsed.model_dump_json(exclude_none=False)) == doc["frame"]


@pytest.mark.parametrize(
    "path", [p for p in FRAMES if load(p)["direction"] == "bridge->daemon"], ids=lambda p: p.stem
)
def test_request_frame_uses_its_routes_model(path: Path) -> None:
    doc = load(path)
    expected = route_table()[doc["route"]]
    assert expected is not None, f"{doc['route']} takes no body"
    assert doc["model"] == expected.__name__


def test_every_post_route_has_a_frame() -> None:
    docs = [load(p) for p in FRAMES]
    for route, model in route_table().items():
        if not route.startswith("POST "):
            continue
        frames = [d for d in docs if d["route"] == route]
        assert frames, f"no golden frame for {route}"
        if model is not None:
            assert any(
                d["direction"] == "bridge->daemon" and d["model"] == model.__name__ for d in frames
            ), f"no {model.__name__} request frame for {route}"


def test_every_bridge_route_has_a_reply_frame() -> None:
    """The bridge decodes answers of these routes (the others it fires and forgets)."""
    replies = {load(p)["route"] for p in FRAMES if load(p)["direction"] == "daemon->bridge"}
    for route in (
        "GET /v1/health",
        "POST /v1/sessions/start",
        "POST /v1/tool_result",
        "POST /v1/aux/result",
        "POST /v1/context",
        "POST /v1/recall",
        "POST /v1/capabilities/search",
    ):
        assert route in replies, route


def test_frames_cover_each_message_kind() -> None:
    docs = [load(p) for p in FRAMES]
    tools = {d["frame"]["tool_name"] for d in docs if d["model"] == "ToolResult"}
    assert {"bash", "read", "write"} <= tools
    assert any(d["model"] == "ToolResultReply" and d["frame"]["aux"] for d in docs)
    kinds = {e["kind"] for d in docs if d["model"] == "ContextReply" for e in d["frame"]["edits"]}
    assert kinds == {"tombstone", "remove", "strip_write", "strip_edit", "mask"}
    caps = [d["frame"] for d in docs if d["model"] == "CapabilityReply"]
    assert any(c["skill_body"] for c in caps) and any(c["activate_tool"] for c in caps)


def test_health_frame_speaks_the_current_protocol() -> None:
    health = load(FRAMES_DIR / "health.json")["frame"]
    assert health["protocol"] == P.PROTOCOL_VERSION


@pytest.mark.parametrize(
    "path", [p for p in FRAMES if load(p)["model"] == "ContextRequest"], ids=lambda p: p.stem
)
def test_context_tail_is_describe_tail_of_the_stored_messages(path: Path) -> None:
    doc = load(path)
    tail = describe_tail(doc["messages"], set(doc["seen"]))
    assert tail.to_json() == doc["frame"]["tail"]
    assert doc["frame"]["message_count"] == len(doc["messages"])


def test_context_reply_edits_target_the_tail() -> None:
    """Invariant 3 as seen on the wire: each edit names a call of the request's tail."""
    request = load(FRAMES_DIR / "context_request.json")["frame"]
    ids = {m.get("toolCallId") for m in request["tail"]["messages"]} | {
        c["id"] for m in request["tail"]["messages"] for c in m.get("toolCalls", [])
    }
    for name in ("context_reply.json", "context_reply_remove.json"):
        for edit in load(FRAMES_DIR / name)["frame"]["edits"]:
            assert edit["toolCallId"] in ids


def test_silent_mode_never_resends_the_previous_request() -> None:
    """Every small tail shape (1-4 rounds of 1-2 calls, text or not, user turns between, any
    DROP pattern): silent mode never removes — with pi's one assistant message per call that
    would repeat the previous request or end on an assistant message (docs/architecture.md) —
    and when everything is dropped the trailing round still leaves, as tombstones. Hence
    `context_reply_remove.json` is hand-made."""

    def assistant(ids: list[str], text: bool) -> TailMessage:
        calls = [TailToolCall(id=i, name="read", argsSig=f"sig-{i}", argsChars=20) for i in ids]
        return TailMessage(role="assistant", toolCalls=calls, hasText=text)

    def result(i: str) -> TailMessage:
        return TailMessage(
            role="toolResult", toolCallId=i, toolName="read", chars=4000, isError=False
        )

    blocks: list[tuple[int, bool] | None] = [(1, False), (1, True), (2, False), (2, True), None]
    for n in range(1, 5):
        for combo in itertools.product(blocks, repeat=n):
            messages: list[TailMessage] = []
            ids: list[str] = []
            for block in combo:
                if block is None:
                    messages.append(TailMessage(role="user"))
                    continue
                new = [f"c{len(ids) + j}" for j in range(block[0])]
                ids += new
                messages += [assistant(new, block[1]), *map(result, new)]
            for drops in itertools.product((False, True), repeat=len(ids)):
                tags = {i: "DROP" for i, d in zip(ids, drops, strict=True) if d}
                edits = decide_edits(Tail(start=0, messages=messages), tags, mode="silent")
                assert not any(isinstance(e, RemoveEdit) for e in edits), combo
                if (
                    ids and all(drops) and messages[-1].role == "toolResult"
                ):  # trailing round hidden
                    assert any(e.kind == "tombstone" and e.toolCallId == ids[-1] for e in edits), (
                        combo
                    )
