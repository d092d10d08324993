"""docker/podman build, BuildKit and classic formats: the failing step, its last output
lines, the "failed to solve" / "returned a non-zero code" line, and the image id."""

from __future__ import annotations

from collections.abc import Sequence

from ctxwrap.digest._rules import DETAIL, FAILURE, LOCATION, NOTE, SUMMARY, Family, rule


class DockerBuildFamily(Family):
    name = "docker"
    rules = (
        rule(
            r"^(?:ERROR|error): failed to (?:solve|build)|did not complete successfully|returned a non-zero code",
            ("error", "did not complete", "non-zero code"),
            SUMMARY,
        ),
        rule(r"^#\d+ ERROR: |^ERROR: |^ERROR \[", "error", FAILURE),
        rule(r"^\s*>>> ", ">>> ", DETAIL),
        rule(r"^Dockerfile:\d+$", "Dockerfile:", LOCATION),
        rule(r"^#\d+ \[[^\]]+\] (?:RUN|COPY|ADD|FROM|WORKDIR)\b", "] ", NOTE),
        rule(r"^Step \d+/\d+ : ", "Step ", NOTE),
    )

    @classmethod
    def claims_command(cls, program: str, args: Sequence[str]) -> bool:
        if program not in ("docker", "podman", "buildah", "nerdctl"):
            return False
        words = [a for a in args if not a.startswith("-")]
        return words[:1] == ["build"] or words[:2] in (
            ["buildx", "build"],
            ["compose", "build"],
            ["image", "build"],
        )

    @classmethod
    def sniff(cls, sample: str) -> bool:
        return (
            "[internal] load build definition" in sample
            or "Sending build context to Docker daemon" in sample
        )
