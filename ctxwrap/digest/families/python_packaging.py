"""pip and uv: resolution and build errors (with uv's ×/╰─> blocks), the final
"Successfully installed" or "Installed N packages" line; download progress is noise."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ctxwrap.digest._rules import DETAIL, FAILURE, NOTE, Family, rule


class PythonPackagingFamily(Family):
    name = "pip"
    rules = (
        rule(r"^ERROR: ", "error", FAILURE),
        rule(r"^error: ", "error", FAILURE, after=4, context_priority=DETAIL),
        rule(r"^\s*× ", "× ", FAILURE, after=3, context_priority=DETAIL),
        rule(r"^\s*╰─> ", "╰─>", DETAIL, after=6, context_priority=DETAIL),
        rule(r"^(?:Failed to build|Could not build wheels)", ("fail", "error"), FAILURE),
        rule(r"^WARNING: ", "warn", NOTE),
    )

    @classmethod
    def claims_command(cls, program: str, args: Sequence[str]) -> bool:
        if program in ("pip", "pip3", "pipx"):
            return True
        if program == "uv":
            return args[:1] in (["pip"], ["sync"], ["add"], ["lock"], ["remove"], ["venv"])
        return program == "poetry" and args[:1] in (["install"], ["add"], ["lock"], ["update"])

    @classmethod
    def sniff(cls, sample: str) -> bool:
        markers = ("Collecting ", "Requirement already satisfied", "Successfully installed ")
        return any(marker in sample for marker in markers) and (
            re.search(
                r"^(?:Collecting |Requirement already satisfied|Successfully installed )",
                sample,
                re.M,
            )
            is not None
        )
