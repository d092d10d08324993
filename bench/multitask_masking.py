"""What history masking saves on a multi-task session with idle gaps (real pi, scripted model).

Three tasks, each reading two large files and running a small grep, run as `pi -p` then two
`pi --continue -p` with a 2.5 s pause between them and the cache TTL set to 2 s; the same script
runs with plain pi and with `ctxwrap pi`. Printed: chars of all main requests, aux chars, the
net saving, and the size of the last request.

    .venv/bin/python bench/multitask_masking.py pi pi-0.73 [--nomask]
"""

import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from support import make_xdg, run_ctxwrap_pi

from ctxwrap.testing.model_server import ScriptedModelServer


def src(name, n):
    return f"# {name}\n" + "".join(
        f"def {name}_{i}(x):\n    return x * {i}  # {name}\n" for i in range(n)
    )


FILES = {f"m{i}.py": src(f"m{i}", 150) for i in range(6)}


def task(a, b):
    return [
        {"tool_calls": [{"name": "read", "arguments": {"path": a}}]},
        {"tool_calls": [{"name": "read", "arguments": {"path": b}}]},
        {"tool_calls": [{"name": "bash", "arguments": {"command": f"grep -c def {a}"}}]},
        {"text": f"done with {a} and {b}"},
    ]


TASKS = [task("m0.py", "m1.py"), task("m2.py", "m3.py"), task("m4.py", "m5.py")]


def run(pi, plain):
    tmp = Path(tempfile.mkdtemp())
    xdg = make_xdg(tmp)
    env = {"PI_CTX_CACHE_TTL_S": "2", **({"PI_CTX_MASK": "0"} if "--nomask" in sys.argv else {})}
    with ScriptedModelServer([s for t in TASKS for s in t]) as srv:
        home = None
        for k in range(3):
            r = run_ctxwrap_pi(
                pi,
                tmp,
                xdg,
                prompt=f"task {k}",
                files=FILES,
                extra_env=env,
                server=srv,
                home=home,
                args=("--continue",) if k else (),
                plain=plain,
            )
            assert r.proc.returncode == 0, r.proc.stderr
            home = r.home
            if k < 2:
                time.sleep(2.5)
        sent = sum(
            len(json.dumps(req.body["messages"], ensure_ascii=False)) for req in srv.main_requests
        )
        aux = sum(
            len(json.dumps(req.body["messages"], ensure_ascii=False)) for req in srv.aux_requests
        )
        last = len(json.dumps(srv.main_requests[-1].body["messages"], ensure_ascii=False))
    xdg.kill_daemon()
    return sent, aux, last


for pi in [a for a in sys.argv[1:] if not a.startswith("--")]:
    p, _, plast = run(pi, True)
    c, aux, clast = run(pi, False)
    print(
        f"{pi}: plain {p:,} chars; ctxwrap {c:,} + aux {aux:,} -> {100 * (1 - (c + aux) / p):.1f}% fewer net "
        f"({100 * (1 - c / p):.1f}% before aux); last request {plast:,} vs {clast:,}"
    )
