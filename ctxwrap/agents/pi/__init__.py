"""The pi adapter: ``launcher`` (`ctxwrap pi`: pi under the PTY with the bridge loaded) and
``doctor_check`` (`ctxwrap doctor`'s pi and Node checks).

The bridge itself is TypeScript run inside pi's process, so it is not in this package: it
lives in ``ctxwrap/_bridge/`` (``ctxwrap-bridge.ts``: pi's hooks → daemon calls; ``edits.ts``,
``masking.ts``: the engine's decisions, kept identical to ``ctxwrap.engine`` by golden cases),
where the wheel ships it and the golden tests find it. pi's message shape is the engine's own
(``ctxwrap.engine.edits``).
"""
