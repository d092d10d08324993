"""One module per command family; FAMILIES is searched in order for the command's family,
SNIFF_ORDER for the output's when the command says nothing."""

from __future__ import annotations

from ctxwrap.digest._rules import Family
from ctxwrap.digest.families.cargo import CargoFamily
from ctxwrap.digest.families.docker import DockerBuildFamily
from ctxwrap.digest.families.git import GitDiffFamily, GitLogFamily, GitStatusFamily
from ctxwrap.digest.families.gotest import GoFamily
from ctxwrap.digest.families.javascript import EslintFamily, NodeFamily, TscFamily
from ctxwrap.digest.families.listing import FindFamily, GrepFamily, LsFamily, TreeFamily
from ctxwrap.digest.families.native import NativeBuildFamily
from ctxwrap.digest.families.python_packaging import PythonPackagingFamily
from ctxwrap.digest.families.python_tests import PytestFamily, UnittestFamily

FAMILIES: tuple[type[Family], ...] = (
    PytestFamily,
    UnittestFamily,
    GoFamily,
    CargoFamily,
    TscFamily,
    EslintFamily,
    NodeFamily,
    NativeBuildFamily,
    PythonPackagingFamily,
    GitLogFamily,
    GitDiffFamily,
    GitStatusFamily,
    DockerBuildFamily,
    FindFamily,
    LsFamily,
    TreeFamily,
    GrepFamily,
)

# Listings have no reliable signature, so they are chosen from the command only.
SNIFF_ORDER: tuple[type[Family], ...] = (
    PytestFamily,
    CargoFamily,
    GoFamily,
    UnittestFamily,
    TscFamily,
    EslintFamily,
    NativeBuildFamily,
    NodeFamily,
    PythonPackagingFamily,
    DockerBuildFamily,
    GitDiffFamily,
    GitLogFamily,
    GitStatusFamily,
)

__all__ = ["FAMILIES", "SNIFF_ORDER"]
