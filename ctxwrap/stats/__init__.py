"""`ctxwrap stats`: what ctxwrap saved, per mechanism, net of the aux model's own tokens.

Three modules, so that what runs in the daemon's hot path loads no view:

- `compute`: the SQLite store (read-only) → figures (`compute_stats`, `session_totals`, which
  the daemon runs at every turn end, `session_headline`, `load_report`). No CLI framework, no
  drawing.
- `render`: a report as text or JSON (`render_text`, `render_json`); prints nothing.
- `command`: the click command and the `--watch` loop.

This package imports none of them: import the one you need (`tests/unit/test_views_split.py`
checks that the daemon and the compute side never load click).
"""
