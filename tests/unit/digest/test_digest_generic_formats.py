"""Formats without a family: what a person fixing the failure reads first reaches the digest.

Issue 41: on real logs outside the corpus the generic rules missed an error message the
terminal wrapped onto a second line, WARN/ERROR lines of timestamped service logs and the
summary line of a plan/apply tool. Each sample here is generated at a realistic size (a few
thousand lines where it matters) in the shapes the tools really print (Terraform/OpenTofu,
Pulumi and Helm output as their docs and real CI logs show it; the common logging libraries'
default formats); each test asserts the line reaches the digest and, for failures and
summaries, that it is among the lines an aux answer must keep.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable

import pytest

from ctxwrap.digest import Digest, digest_bash_output
from ctxwrap.digest._rules import _LOG_RECORD_RULES, _PLAN_APPLY_RULES, GENERIC_RULES, Family
from ctxwrap.digest._stream import _table_for
from ctxwrap.digest._text import clean_block

MAX_CHARS = 8192  # the daemon's at the default bash_max_summary_tokens


def digest(text: str, command: str, exit_code: int) -> Digest:
    return digest_bash_output(text, command=command, exit_code=exit_code, max_chars=MAX_CHARS)


def assert_kept(result: Digest, lines: list[str], *, must_keep: bool = True) -> None:
    lost = [line for line in lines if line not in result.text]
    assert not lost, f"lost {lost}\n--- digest ---\n{result.text}"
    if must_keep:
        missing = [line for line in lines if not any(line in kept for kept in result.must_keep)]
        assert not missing, f"not in must_keep: {missing}\n{result.must_keep}"


# -- 1. error messages that continue on the next lines --------------------------------------


def _build_log(rng: random.Random, lines: int) -> list[str]:
    """A build script's chatter: downloads, compile steps, progress."""
    out = []
    for i in range(lines):
        kind = rng.random()
        if kind < 0.4:
            out.append(f"Downloading pkg-{rng.randrange(400)}-{rng.randrange(9)}.tar.gz ({i} kB)")
        elif kind < 0.8:
            out.append(f"  CC      src/module_{rng.randrange(300)}/file_{rng.randrange(40)}.o")
        else:
            out.append(f"[{i * 100 // lines:3d}%] Building target lib{rng.randrange(60)}")
    return out


def test_an_error_the_terminal_wrapped_at_80_columns_keeps_its_second_line() -> None:
    rng = random.Random(1)
    first = "Error: failed to push image registry.example.com/platform/api:3.14.12: unexpecte"
    assert len(first) == 80
    second = "d status code 401 Unauthorized: authentication required for repository push"
    lines = [*_build_log(rng, 3000), first, second]
    lines += [f"Cleaning up layer sha256:{rng.getrandbits(64):016x}" for _ in range(40)]
    result = digest("\n".join(lines) + "\n", "./scripts/release.sh", 1)
    assert_kept(result, [first, second])


def test_a_message_after_error_colon_keeps_its_indented_lines() -> None:
    rng = random.Random(2)
    message = [
        "Error: failed to create cluster: could not find a node image for the requested version:",
        "  requested: kindest/node:v1.31.0",
        "  available: kindest/node:v1.29.2, kindest/node:v1.30.0",
    ]
    lines = [*_build_log(rng, 2500), *message, "", 'Deleting cluster "ci" ...']
    lines += [f"  deleted node ci-worker{i}" for i in range(30)]
    result = digest("\n".join(lines) + "\n", "make e2e-cluster", 2)
    assert_kept(result, message)


def test_continuation_stops_at_the_next_message_and_is_bounded() -> None:
    """A wrapped line takes its continuation, not the next error, nor a whole paragraph."""
    rng = random.Random(3)
    wrapped = "error: " + "x" * 73
    assert len(wrapped) == 80
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india"]
    paragraph = [f"  {word} is part of the indented text under it" for word in words]
    lines = [*_build_log(rng, 2000), wrapped, *paragraph, "warning: something else"]
    lines += _build_log(rng, 200)
    result = digest("\n".join(lines) + "\n", "./build.sh", 1)
    joined = "\n".join(result.must_keep)
    assert "alpha" in joined and "delta" in joined
    assert "hotel" not in joined  # a few lines, not the whole paragraph
    assert "warning: something else" not in joined


def test_a_long_unwrapped_error_line_takes_no_continuation() -> None:
    """Wider than any terminal: the output was not wrapped, the next line is not its message."""
    rng = random.Random(4)
    error = "Error: " + "request failed; " * 30
    lines = [*_build_log(rng, 2000), error, "Done in 3.20s.", *_build_log(rng, 100)]
    result = digest("\n".join(lines) + "\n", "./build.sh", 1)
    assert any(kept.startswith("Error: request failed") for kept in result.must_keep)
    assert "Done in 3.20s." not in result.must_keep


def test_a_compiler_error_does_not_take_the_source_excerpt_as_its_message() -> None:
    lines = [f"gcc -c src/f{i}.c -o build/f{i}.o -O2 -Wall -Wextra" for i in range(400)]
    lines += [
        "src/main.c:12:5: error: implicit declaration of function 'frobnicate' [-Wimplicit-"
        "function-declaration] and a message long enough to fill a terminal",
        "   12 |     frobnicate(ctx);",
        "      |     ^~~~~~~~~~",
        "gcc -c src/g.c -o build/g.o -O2 -Wall -Wextra",
        *[f"gcc -c src/h{i}.c -o build/h{i}.o -O2 -Wall -Wextra" for i in range(20)],
    ]
    result = digest("\n".join(lines) + "\n", "make", 2)
    assert not any("12 |" in kept for kept in result.must_keep)
    assert not any(kept.startswith("gcc -c src/g.c") for kept in result.must_keep)


# -- 2. timestamped service logs ------------------------------------------------------------

# One record per shape: (time, level, message) → the line the library prints.
Shape = Callable[[int, str, str], str]


def _iso(t: int) -> str:
    return f"2026-12-01T{t // 3600 % 24:02d}:{t // 60 % 60:02d}:{t % 60:02d}.{t * 37 % 1000:03d}Z"


def _space(t: int, sep: str = ",") -> str:
    return (
        f"2026-12-01 {t // 3600 % 24:02d}:{t // 60 % 60:02d}:{t % 60:02d}{sep}{t * 37 % 1000:03d}"
    )


SHAPES: dict[str, Shape] = {
    # Rust tracing / Go zerolog console / many others
    "iso8601": lambda t, lvl, msg: f"{_iso(t)} {lvl:>5} api::orders: {msg}",
    # Python logging with a bracketed asctime (and Kafka/Zookeeper's log4j layout)
    "bracketed": lambda t, lvl, msg: f"[{_space(t)}] {lvl} [orders.worker] {msg}",
    # Python's default-ish `%(asctime)s - %(name)s - %(levelname)s - %(message)s`
    "python-dashes": lambda t, lvl, msg: f"{_space(t)} - orders.worker - {lvl} - {msg}",
    # Spring Boot 3
    "spring": lambda t, lvl, msg: (
        f"{_space(t, '.')} {lvl:>5} 4711 --- [orders] [nio-8080-exec-{t % 9}] "
        f"c.a.orders.OrderService                 : {msg}"
    ),
    # logfmt (logrus, Go slog's TextHandler, Heroku)
    "logfmt": lambda t, lvl, msg: (
        f'time="{_iso(t)}" level={lvl.lower()} msg="{msg}" component=orders'
    ),
    # JSON lines (zap, slog's JSONHandler, pino-style keys)
    "json": lambda t, lvl, msg: json.dumps(
        {"ts": _iso(t), "level": lvl.lower(), "logger": "orders", "msg": msg}
    ),
    # glog / klog (Kubernetes components)
    "glog": lambda t, lvl, msg: (
        f"{lvl[0]}1201 {t // 3600 % 24:02d}:{t // 60 % 60:02d}:{t % 60:02d}.{t % 999999:06d}"
        f"       1 controller.go:{100 + t % 200}] {msg}"
    ),
    # syslog as journald/rsyslog write it
    "syslog": lambda t, lvl, msg: (
        f"Dec  1 {t // 3600 % 24:02d}:{t // 60 % 60:02d}:{t % 60:02d} api-3 orders[2231]: "
        f"{lvl.lower()}: {msg}"
    ),
}

_INFO_MESSAGES = (
    "GET /api/v1/orders/{n} 200 {ms}ms",
    "POST /api/v1/orders 201 {ms}ms",
    "cache refresh done entries={n} took={ms}ms",
    "health check ok upstream=payments latency={ms}ms",
    "metrics flushed requests={n} errors=0 p99={ms}ms",
    "consumer lag partition={ms} offset={n}",
)
_ERRORS = (
    "payment capture failed for order 88120: upstream payments returned 503",
    "database pool exhausted: timeout after 30000ms waiting for a connection",
    "could not publish event order.created: kafka broker 10.0.4.7:9092 not available",
)
_WARNINGS = (
    "slow query on orders_by_customer took 4120ms (threshold 1000ms)",
    "retrying request to inventory after connection reset (attempt 2 of 5)",
)


def _service_log(shape: Shape, lines: int = 20000) -> tuple[str, list[str], list[str]]:
    rng = random.Random(4)
    records: list[str] = []
    errors: list[str] = []
    warnings: list[str] = []
    special = {lines * k // 7: k for k in range(1, 6)}
    for i in range(lines):
        t = 36000 + i // 3
        if i in special:
            k = special[i]
            if k % 2:
                line = shape(t, "ERROR", _ERRORS[k // 2])
                errors.append(line)
            else:
                line = shape(t, "WARN", _WARNINGS[k // 2 - 1])
                warnings.append(line)
            records.append(line)
            continue
        message = rng.choice(_INFO_MESSAGES).format(n=rng.randrange(99999), ms=rng.randrange(400))
        records.append(shape(t, "INFO", message))
    return "\n".join(records) + "\n", errors, warnings


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_a_service_log_of_info_lines_digests_to_its_errors_and_warnings(name: str) -> None:
    text, errors, warnings = _service_log(SHAPES[name])
    result = digest(text, "kubectl logs deploy/orders --since=2h", 0)
    assert_kept(result, errors)
    assert_kept(result, warnings, must_keep=False)
    # the digest is about them, not about the INFO lines around them
    assert len(result.text) < 4000, result.text


@pytest.mark.parametrize(
    "line",
    [
        "2026-12-01 10:22:33.123 ERROR 1 --- [main] o.s.boot.SpringApplication : Application run "
        "failed",
        "[2026-12-01T10:22:33Z ERROR orders::db] pool timed out",  # Rust env_logger
        "2026-12-01T10:22:33.123+01:00\terror\torders/db.go:88\tpool timed out",  # zap console
        "web-1  | 2026-12-01 10:22:33,123 CRITICAL [gunicorn.error] WORKER TIMEOUT (pid:12)",
        'time=2026-12-01T10:22:33Z level=fatal msg="cannot bind :8080"',
        '{"level":50,"time":1764584553123,"pid":7,"msg":"unhandled rejection"}',  # pino
        '{"severity":"ERROR","message":"quota exceeded","time":"2026-12-01T10:22:33Z"}',
        "E1201 10:22:33.123456       1 reflector.go:138] failed to list *v1.Pod: forbidden",
        "ERRO[0042] error waiting for container: context canceled",  # logrus text
        "Dec  1 10:22:33 api-3 kernel: panic: runtime error: invalid memory address",
    ],
)
def test_error_records_of_common_loggers_rank_as_failures(line: str) -> None:
    rng = random.Random(5)
    filler = [
        f"2026-12-01 10:{i // 60 % 60:02d}:{i % 60:02d},000 INFO tick {i}" for i in range(900)
    ]
    filler += _build_log(rng, 900)
    result = digest("\n".join([*filler, line, *filler]) + "\n", "./run.sh", 0)
    assert_kept(result, [line])


@pytest.mark.parametrize(
    "line",
    [
        "2026-12-01 10:22:33.123 INFO 1 --- [main] o.s.b.w.e.tomcat.TomcatWebServer : no errors",
        "2026-12-01 10:22:33,123 INFO [app] Error stacktraces are turned on.",
        "2024-01-01T10:00:00.1234567Z 1221 [INFO] Error stacktraces are turned on.",
        "2024-01-01T10:00:00.1234567Z      Error: Failed to generate def for node.lib",
    ],
)
def test_a_record_of_another_level_or_a_ci_timestamp_is_no_service_error(line: str) -> None:
    """The first level of a record decides; GitHub Actions' own timestamp is no service's."""
    assert not any(rule.pattern.search(line) for rule in _LOG_RECORD_RULES)


def test_an_error_record_keeps_its_stack_trace_lines() -> None:
    rng = random.Random(6)
    shape = SHAPES["bracketed"]
    record = [
        shape(40000, "ERROR", "task sync_orders failed"),
        "Traceback (most recent call last):",
        '  File "/app/orders/tasks.py", line 88, in sync_orders',
        "    resp.raise_for_status()",
    ]
    before = [
        shape(39000 + i, "INFO", f"processed batch {rng.randrange(9999)}") for i in range(3000)
    ]
    after = [
        shape(40001 + i, "INFO", f"processed batch {rng.randrange(9999)}") for i in range(3000)
    ]
    result = digest("\n".join([*before, *record, *after]) + "\n", "docker logs orders", 0)
    assert_kept(result, record)
    assert not any("processed batch" in kept for kept in result.must_keep)


# -- 3. plan/apply summaries ----------------------------------------------------------------


def _terraform_plan(rng: random.Random, tool: str = "Terraform", resources: int = 60) -> list[str]:
    out = [
        f"module.net.aws_subnet.private[{i}]: Refreshing state... [id=subnet-{rng.getrandbits(64):017x}]"
        for i in range(resources)
    ]
    out += [
        "",
        f"{tool} used the selected providers to generate the following execution",
        "plan. Resource actions are indicated with the following symbols:",
        "  + create",
        "  ~ update in-place",
        "",
        f"{tool} will perform the following actions:",
        "",
    ]
    for i in range(resources):
        out += [
            f"  # module.app.aws_instance.worker[{i}] will be created",
            '  + resource "aws_instance" "worker" {',
        ]
        for attribute in (
            "ami", "arn", "associate_public_ip_address", "availability_zone", "cpu_core_count",
            "id", "instance_state", "instance_type", "ipv6_address_count", "primary_network_interface_id",
            "private_dns", "private_ip", "public_dns", "public_ip", "secondary_private_ips", "subnet_id",
        ):  # fmt: skip
            out.append(f"      + {attribute:<36} = (known after apply)")
        out += [
            "      + tags                                 = {",
            f'          + "Name" = "worker-{i}"',
            "        }",
            "    }",
            "",
        ]
    out += [
        f"Plan: {resources} to add, 2 to change, 0 to destroy.",
        "",
        "Changes to Outputs:",
        "  + worker_ips = [",
        *["      + (known after apply)," for _ in range(resources)],
        "    ]",
    ]
    return out


def _terraform_apply(rng: random.Random, *, fail: bool, tool: str = "Terraform") -> list[str]:
    out = _terraform_plan(rng, tool)
    out += [""]
    out += [f"module.app.aws_instance.worker[{i}]: Creating..." for i in range(60)]
    for elapsed in (10, 20, 30, 40):
        out += [
            f"module.app.aws_instance.worker[{i}]: Still creating... [{elapsed}s elapsed]"
            for i in range(60)
        ]
    if fail:
        return [
            *out,
            "╷",
            "│ Error: creating EC2 Instance: InvalidParameterValue: Value (t3.mega) for parameter "
            "instanceType is invalid. Value is not a valid instance type.",
            "│ \tstatus code: 400, request id: 1c9e7a2b-5d3f-4c61-9e0a-2b7f8d4e6a10",
            "│ ",
            "│   with module.app.aws_instance.worker[3],",
            '│   on modules/app/main.tf line 42, in resource "aws_instance" "worker":',
            '│   42: resource "aws_instance" "worker" {',
            "│ ",
            "╵",
            "Releasing state lock. This may take a few moments...",
        ]
    out += [
        f"module.app.aws_instance.worker[{i}]: Creation complete after 4{i % 10}s [id=i-0{rng.getrandbits(60):015x}]"
        for i in range(60)
    ]
    return [
        *out,
        "",
        "Apply complete! Resources: 60 added, 2 changed, 0 destroyed.",
        "",
        "Outputs:",
        "",
        "worker_ips = [",
        *[f'  "10.0.{i // 250}.{i % 250}",' for i in range(60)],
        "]",
    ]


@pytest.mark.parametrize("tool", ["Terraform", "OpenTofu"])
def test_a_plan_keeps_its_plan_line(tool: str) -> None:
    lines = _terraform_plan(random.Random(7), tool)
    lines += [
        "",
        "─" * 77,
        "",
        f"Note: You didn't use the -out option to save this plan, so {tool} can't guarantee to",
        f'take exactly these actions if you run "{tool.lower()} apply" now.',
    ]
    result = digest("\n".join(lines) + "\n", f"{tool.lower()} plan", 0)
    assert_kept(result, ["Plan: 60 to add, 2 to change, 0 to destroy."])


def test_an_apply_keeps_its_plan_and_its_verdict() -> None:
    result = digest(
        "\n".join(_terraform_apply(random.Random(8), fail=False)) + "\n",
        "terraform apply -auto-approve",
        0,
    )
    assert_kept(
        result,
        [
            "Plan: 60 to add, 2 to change, 0 to destroy.",
            "Apply complete! Resources: 60 added, 2 changed, 0 destroyed.",
        ],
    )


def test_a_failed_apply_keeps_its_error_box_whole() -> None:
    lines = _terraform_apply(random.Random(9), fail=True)
    box = lines[lines.index("╷") : lines.index("╵") + 1]
    result = digest("\n".join(lines) + "\n", "terraform apply -auto-approve", 1)
    assert_kept(result, [line.rstrip() for line in box], must_keep=False)
    assert_kept(result, [box[1], box[2], box[4], box[5], "Plan: 60 to add"])
    assert not any(kept.strip() in {"│", "╷", "╵"} for kept in result.must_keep)


def test_no_changes_and_destroy_complete_are_summaries() -> None:
    rng = random.Random(10)
    refresh = [
        f"module.app.aws_instance.worker[{i}]: Refreshing state... [id=i-0{rng.getrandbits(60):015x}]"
        for i in range(2500)
    ]
    no_changes = "No changes. Your infrastructure matches the configuration."
    lines = [*refresh, "", no_changes, "", "Terraform has compared your real infrastructure "
             "against your configuration and found no", "differences, so no changes are needed."]  # fmt: skip
    assert_kept(digest("\n".join(lines) + "\n", "terraform plan", 0), [no_changes])
    destroyed = [
        f"module.app.aws_instance.worker[{i}]: Destruction complete after 31s" for i in range(2500)
    ]
    verdict = "Destroy complete! Resources: 2500 destroyed."
    lines = [*destroyed, "", verdict, "", "Releasing state lock. This may take a few moments..."]
    lines += [f"  cleanup {i}" for i in range(20)]
    assert_kept(digest("\n".join(lines) + "\n", "terraform destroy -auto-approve", 0), [verdict])


def _pulumi_up(rng: random.Random, *, fail: bool) -> list[str]:
    out = [
        "Updating (acme/infra/dev)",
        "",
        "View in Browser (Ctrl+O): https://app.pulumi.com/acme/infra/dev/updates/42",
        "",
        "     Type                              Name                 Status              Info",
        " +   pulumi:pulumi:Stack               infra-dev            creating (0s)",
    ]
    for i in range(400):
        out.append(f" +   ├─ aws:ec2:Instance               web-{i:<3}              creating (0s)")
    for i in range(400):
        out.append(
            f" +   ├─ aws:ec2:Instance               web-{i:<3}              created ({rng.randrange(5, 60)}s)"
        )
    out.append("     pulumi:pulumi:Stack               infra-dev")
    summary = ["Resources:", "    + 398 created", "    ~ 2 updated", "    12 unchanged"]
    if fail:
        out += [
            "",
            "Diagnostics:",
            "  aws:ec2:Instance (web-7):",
            "    error: 1 error occurred:",
            "    \t* creating EC2 Instance: InvalidAMIID.NotFound: The image id '[ami-0abc123]' does not exist",
            "    \tstatus code: 400, request id: 3f1c2b7a-9e0d-4c6b-8a1f-2d3e4f5a6b7c",
            "",
            "  pulumi:pulumi:Stack (infra-dev):",
            "    error: update failed",
        ]
    out += ["", "Outputs:", "    publicIps: ["]
    out += [f'        [{i}]: "3.91.{i // 250}.{i % 250}"' for i in range(398)]
    out += ["    ]", "", *summary, "", "Duration: 3m12s"]
    return out


@pytest.mark.parametrize("fail", [False, True])
def test_pulumi_up_keeps_its_resource_counts_and_errors(fail: bool) -> None:
    lines = _pulumi_up(random.Random(11), fail=fail)
    result = digest("\n".join(lines) + "\n", "pulumi up --yes --non-interactive", int(fail))
    assert_kept(result, ["Resources:", "    + 398 created", "    ~ 2 updated", "Duration: 3m12s"])
    if fail:
        assert_kept(
            result,
            [
                "    error: 1 error occurred:",
                "* creating EC2 Instance: InvalidAMIID.NotFound",
                "    error: update failed",
            ],
        )


def _helm_upgrade(rng: random.Random) -> list[str]:
    out = [f"upgrade.go:{140 + i}: [debug] preparing upgrade for web" for i in range(20)]
    out += [
        'Release "web" has been upgraded. Happy Helming!',
        "NAME: web",
        "LAST DEPLOYED: Tue Dec  1 10:22:33 2026",
        "NAMESPACE: prod",
        "STATUS: deployed",
        "REVISION: 7",
        "TEST SUITE: None",
        "USER-SUPPLIED VALUES:",
    ]
    out += [f"replicaCount{i}: {rng.randrange(9)}" for i in range(60)]
    out += ["", "COMPUTED VALUES:"]
    out += [f"  key{i}: value{rng.randrange(999)}" for i in range(900)]
    out += ["", "HOOKS:", "MANIFEST:", "---"]
    out += [f"    {'  ' * (i % 4)}field{i}: {rng.randrange(9999)}" for i in range(1500)]
    out += ["", "NOTES:", "1. Get the application URL by running these commands:"]
    out += [
        f"  export POD_NAME=$(kubectl get pods -n prod -l app={i}) # step {i}" for i in range(15)
    ]
    return out


def test_helm_keeps_its_release_status() -> None:
    lines = _helm_upgrade(random.Random(12))
    result = digest("\n".join(lines) + "\n", "helm upgrade --install web ./chart --debug", 0)
    assert_kept(result, ["STATUS: deployed", 'Release "web" has been upgraded. Happy Helming!'])


def test_helm_failure_keeps_its_error() -> None:
    lines = _helm_upgrade(random.Random(13))[:1000]
    error = (
        'Error: UPGRADE FAILED: cannot patch "web" with kind Deployment: Deployment.apps "web" '
        "is invalid: spec.template.spec.containers[0].image: Required value"
    )
    lines += [error, *[f"helm.go:84: [debug] frame {i}" for i in range(30)]]
    result = digest("\n".join(lines) + "\n", "helm upgrade --install web ./chart --debug", 1)
    assert_kept(result, [error])


def test_kubectl_rollout_status_keeps_its_verdict() -> None:
    lines = []
    for i in range(600):
        lines.append(
            f'Waiting for deployment "web" rollout to finish: {i % 3} of 3 updated replicas are '
            "available..."
        )
        lines.append(f"Waiting for deployment spec update to be observed... ({i})")
    verdict = 'deployment "web" successfully rolled out'
    lines += [verdict]
    lines += [f"pod/web-7d9f{i:04d} condition met" for i in range(30)]
    result = digest("\n".join(lines) + "\n", "kubectl rollout status deploy/web && kubectl wait", 0)
    assert_kept(result, [verdict])


# -- speed ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_the_new_rules_leave_info_records_to_the_block_scan(name: str) -> None:
    """Speed: rules run in Python only on lines the RE2 pass finds an anchor in. Every record
    of these logs has a time and a level, yet the INFO ones hold no anchor of the new rules:
    a 20,000-line log hands Python only its WARN/ERROR records more than the rules before
    them did (its `errors=0` metrics lines hold the old `error` anchor)."""

    class Before(Family):
        uses_generic_rules = False
        rules = tuple(r for r in GENERIC_RULES if r not in _LOG_RECORD_RULES + _PLAN_APPLY_RULES)

    text, errors, warnings = _service_log(SHAPES[name])
    folded = clean_block(text.encode()).upper()
    classified = len(_table_for(Family()).anchored_lines(folded))
    before = len(_table_for(Before()).anchored_lines(folded))
    assert classified <= before + len(errors) + len(warnings)
    start = time.process_time()
    result = digest(text, "./serve.sh", 0)
    assert time.process_time() - start < 3  # ~0.25 s on 2 shared cores
    assert_kept(result, errors)


def test_lines_of_separators_do_not_make_the_record_rules_backtrack() -> None:
    """A timestamp, then a long run of `:`/`-` and an error word: the fields before a level are
    matched possessively (one such line took 10 s of regex backtracking before)."""
    lines = [
        "Dec  1 10:22:33 " + ":" * 1500 + " error",
        "[2026-12-01 10:22:33,123] " + "-".join(["abc"] * 500) + " ERROR",
    ] * 20
    start = time.process_time()
    digest("\n".join(lines) + "\n", "./serve.sh", 0)
    assert time.process_time() - start < 1.0
