"""pip and uv: resolution and build errors (with uv's ×/╰─> blocks), the final
"Successfully installed" or "Installed N packages" line; download progress is noise."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ctxwrap.digest._rules import DETAIL, FAILURE, IGNORE, NOTE, SUMMARY, Family, rule


class PythonPackagingFamily(Family):
    name = "pip"
    rules = (
        rule(r"^ERROR: ", "ERROR:", FAILURE),
        rule(r"^error: ", "error:", FAILURE, after=4, context_priority=DETAIL),
        rule(r"^\s*× ", "× ", FAILURE, after=3, context_priority=DETAIL),
        rule(r"^\s*╰─> ", "╰─>", DETAIL, after=6, context_priority=DETAIL),
        rule(r"^Successfully (?:installed|uninstalled|built) ", "Successfully", SUMMARY),
        rule(
            r"^\s*(?:Installed|Uninstalled|Resolved|Prepared|Audited) \d+ packages?",
            ("Installed", "Uninstalled", "Resolved", "Prepared", "Audited"),
            SUMMARY,
        ),
        rule(
            r"^(?:Failed to build|Could not build wheels|Building wheel .* error)",
            ("Failed to build", "Could not build", "error"),
            FAILURE,
        ),
        rule(r"^note: ", "note:", NOTE),
        rule(r"^WARNING: ", "WARNING:", NOTE),
        rule(
            r"^\s*(?:Downloading|Collecting|Using cached|Processing|Requirement already) ",
            ("Downloading", "Collecting", "Using cached", "Processing", "Requirement already"),
            IGNORE,
        ),
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
        return (
            re.search(
                r"^(?:Collecting |Requirement already satisfied|Successfully installed )",
                sample,
                re.M,
            )
            is not None
        )
