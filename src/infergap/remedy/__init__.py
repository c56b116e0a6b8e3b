"""Apply runtime remedies with a journal, revert them exactly (``infergap fix``)."""

from infergap.remedy.actions import HANDLERS, MODULES, SETPCI_REGISTERS, SYSCTL_KEYS, RemedyFailed, RemedyRefused, handler_for
from infergap.remedy.engine import (
    Change,
    ChangeState,
    FixPlan,
    FixRefused,
    FixResult,
    RevertResult,
    apply_plan,
    load_report,
    plan_fix,
    revert_run,
)
from infergap.remedy.system import SystemPaths, container_reason, is_root

__all__ = [
    "HANDLERS", "MODULES", "SETPCI_REGISTERS", "SYSCTL_KEYS", "Change", "ChangeState", "FixPlan", "FixRefused",
    "FixResult", "RemedyFailed", "RemedyRefused", "RevertResult", "SystemPaths", "apply_plan", "container_reason",
    "handler_for", "is_root", "load_report", "plan_fix", "revert_run",
]
