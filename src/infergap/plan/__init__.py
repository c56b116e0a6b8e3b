"""The plan: from audit, roofline, bench, server configuration and logs to a tiered, ranked list of
what to do (and what not to), each item with the facts that selected it.

Entry point: :func:`build_plan` → :class:`Plan` (JSON schema ``infergap.plan/1``). The lever
catalog is data (``infergap/data/levers.yaml``), read by :func:`load_catalog`.
"""

from infergap.plan.build import SCHEMA, Gap, GapPoint, HostFix, Plan, PlanItem, Stage, Unknown, build_plan
from infergap.plan.catalog import TIER_LABEL, TIER_ORDER, Lever, load_catalog
from infergap.plan.conditions import Fact, evaluate

__all__ = ["SCHEMA", "Fact", "Gap", "GapPoint", "HostFix", "Lever", "Plan", "PlanItem", "Stage", "TIER_LABEL", "TIER_ORDER",
           "Unknown", "build_plan", "evaluate", "load_catalog"]
