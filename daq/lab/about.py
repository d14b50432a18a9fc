"""A lab session's ``about`` child (layout 3): the bulk of its description - config snapshot, devices,
plan outcome, the analysis report - kept beside the session container, whose metadata holds only what a
search filters and a listing shows. A PostgreSQL catalogue then filters and returns a few hundred bytes
of JSON a session instead of reading 6-10 kB of compressed, out-of-line metadata for every candidate row
and every condition (docs/lab.md, "Search at scale"). Readers merge the two; sessions of layouts 1 and 2
(everything in the container, no ``about``) read as they are."""

from __future__ import annotations

from daq.lab import layout

#: Where an analysis's report goes in ``about`` (its summary stays in the container's ``analysis``).
REPORT = "analysis_report"


def child(node, key: str):
    """``node[key]``, or None when the lab has no such node."""
    try:
        return node[key]
    except KeyError:
        return None


def split_analysis(analysis: dict) -> tuple[dict, dict | None]:
    """(the searched summary: estimates, intervals, verdict, who, where, when; the report or None)."""
    summary = {k: v for k, v in analysis.items() if k != "report"}
    return summary, analysis.get("report")


def about_metadata(node) -> dict:
    """The metadata of the session container ``node``'s ``about`` child ({} for layouts 1 and 2)."""
    found = child(node, layout.ABOUT)
    return layout.plain(found.metadata) if found is not None else {}


def merged(meta: dict, about: dict) -> dict:
    """A session's whole description: its container's metadata with its ``about`` child's."""
    whole = {**meta, **{k: v for k, v in about.items() if k in layout.ABOUT_FIELDS}}
    if about.get(REPORT) is not None and isinstance(whole.get("analysis"), dict):
        whole["analysis"] = {**whole["analysis"], "report": about[REPORT]}
    return whole


def lab_analysis(node) -> dict | None:
    """The session's analysis in the lab, with its report (None: none yet)."""
    found = layout.plain(node.metadata.get("analysis"))
    if not found:
        return None
    if "report" not in found:
        report = about_metadata(node).get(REPORT)
        if report is not None:
            found["report"] = report
    return found


def write_about(node, fields: dict) -> None:
    """Put ``fields`` into the session ``node``'s ``about`` child (made if missing: a concurrent maker's
    409 is taken as made)."""
    found = child(node, layout.ABOUT)
    if found is None:
        try:
            node.create_container(layout.ABOUT, metadata={"layout": layout.LAYOUT_VERSION, **fields},
                                  specs=[layout.ABOUT_SPEC])
            return
        except Exception as exc:
            if getattr(getattr(exc, "response", None), "status_code", None) != 409:
                raise
            found = node[layout.ABOUT]
    found.update_metadata(fields, drop_revision=True)


def write_analysis(node, analysis: dict, extra: dict | None = None) -> None:
    """Record ``analysis`` in the lab: its report in ``about``, its summary (and ``extra``, e.g. who
    analysed it) in the searched container; a layout-2 container's old report is dropped from it."""
    from tiled.client.metadata_update import DELETE_KEY  # lazy: tiled's client side

    summary, report = split_analysis(analysis)
    if report is not None:
        write_about(node, {REPORT: report})
    old = node.metadata.get("analysis")
    if hasattr(old, "get") and old.get("report") is not None:
        summary = {**summary, "report": DELETE_KEY}
    node.update_metadata({"analysis": summary, **(extra or {})}, drop_revision=True)
