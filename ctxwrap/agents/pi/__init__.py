"""The pi adapter: ``launcher`` (`ctxwrap pi`: pi under the PTY with the bridge loaded).

The bridge itself is TypeScript run inside pi's process; it stays in ``ctxwrap/_bridge/``
(``ctxwrap-bridge.ts``, ``edits.ts``, ``masking.ts``), where the wheel ships it and the golden
tests find it. pi's message shape is the engine's own (``ctxwrap.engine.edits``).
"""
