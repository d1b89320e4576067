"""Text (rich) and Markdown views of a gate inventory and of a diff between two pins."""

from __future__ import annotations

from forgepatch.gates.diff import Change, GateDiff
from forgepatch.gates.model import NEVER, Gate, Inventory
from forgepatch.gates.rejecting import groups


def arches(gate: Gate | None) -> str:
    """``sm90 sm100?`` — an arch marked ``?`` passes only if the gate's other conditions hold."""
    if gate is None:
        return "-"
    out = [a + ("?" if v == "conditional" else "") for a, v in gate.verdicts.items() if v != NEVER]
    return " ".join(out) or "none"


def _delta(change: Change) -> str:
    parts = [f"+{a}" for a in change.gained()] + [f"-{a}" for a in change.lost()]
    return " ".join(parts)


def _pins(d: GateDiff) -> str:
    return f"{d.old.version or d.old.source} -> {d.new.version or d.new.source}"


def summary(d: GateDiff) -> str:
    scope = f" for {d.arch}" if d.arch else ""
    return (f"gates {_pins(d)}{scope}: {d.count('changed')} arch set(s) changed, {d.count('moved')} moved, "
            f"{d.count('added')} added, {d.count('removed')} removed ({d.unchanged} unchanged)")


def predicate_lines(d: GateDiff) -> list[str]:
    out = []
    for p in d.predicates:
        gained = [a for a in p.new.arches if a not in p.old.arches]
        lost = [a for a in p.old.arches if a not in p.new.arches]
        if d.arch and d.arch not in gained + lost:
            continue
        what = "; ".join(x for x in (f"now accepts {', '.join(gained)}" if gained else "",
                                     f"no longer accepts {', '.join(lost)}" if lost else "") if x)
        guards = ", ".join(f"{g.function} ({g.where})" for g in p.guards[:3])
        more = f" and {len(p.guards) - 3} more" if len(p.guards) > 3 else ""
        out.append(f"{p.name} ({p.new.file}:{p.new.line}) {what}" + (f"; it guards {guards}{more}" if guards else ""))
    return out


# -- markdown ----------------------------------------------------------------------------
def inventory_markdown(inv: Inventory, gates: list[Gate], title: str) -> str:
    out = [f"### forgepatch gates: {inv.version or inv.source} — {title}", "",
           "| where | function | kind | arches | condition |", "|---|---|---|---|---|"]
    for g in gates:
        out.append(f"| `{g.where}` | `{g.function}` | {g.kind} | {arches(g)} | `{_md(g.expr)}` |")
    out += ["", f"{len(gates)} gate(s); `?`: passes only if the gate's other conditions hold."]
    return "\n".join(out) + "\n"


def diff_markdown(d: GateDiff) -> str:
    out = [f"### forgepatch gates: {_pins(d)}", "", summary(d), ""]
    preds = predicate_lines(d)
    if preds:
        out += ["**Predicates whose arch set changed**", ""] + [f"- {line}" for line in preds] + [""]
    rows = d.selected()
    if rows:
        out += ["| change | where | function | arches before | arches after | condition |", "|---|---|---|---|---|---|"]
        for c in rows:
            g = c.new or c.old
            where = f"`{c.old.where}` -> `{c.new.where}`" if c.moved else f"`{g.where}`"
            func = f"`{c.old.function}` -> `{c.new.function}`" if c.moved and c.old.function != c.new.function \
                else f"`{g.function}`"
            status = f"**{c.status}** {_delta(c)}".strip() if c.status == "changed" else c.status
            out.append(f"| {status} | {where} | {func} | {arches(c.old)} | {arches(c.new)} | `{_md(g.expr)}` |")
    return "\n".join(out) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("`", "'")


# -- rich ----------------------------------------------------------------------------------
def inventory_table(inv: Inventory, gates: list[Gate], title: str, console) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(f"{inv.version or inv.source}: {title}"), title_justify="left")
    for col, ratio in (("where", 3), ("function", 2), ("kind", 1), ("arches", 2), ("condition", 4)):
        table.add_column(col, overflow="fold", ratio=ratio)
    for g in gates:
        table.add_row(escape(g.where), escape(g.function), g.kind, arches(g), escape(g.expr))
    console.print(table)
    console.print(f"{len(gates)} gate(s); ?: passes only if the gate's other conditions hold")


def diff_table(d: GateDiff, console) -> None:
    from rich.markup import escape
    from rich.table import Table

    console.print(escape(summary(d)))
    for line in predicate_lines(d):
        console.print(f"[yellow]predicate[/] {escape(line)}")
    rows = d.selected()
    if not rows:
        return
    styles = {"changed": "bold yellow", "moved": "cyan", "added": "green", "removed": "red"}
    table = Table(title=escape(f"gate changes {_pins(d)}"), title_justify="left")
    for col, ratio in (("change", 2), ("where", 3), ("function", 2), ("arches before", 2), ("arches after", 2),
                       ("condition", 4)):
        table.add_column(col, overflow="fold", ratio=ratio)
    for c in rows:
        g = c.new or c.old
        where = f"{c.old.where} -> {c.new.where}" if c.moved else g.where
        func = f"{c.old.function} -> {c.new.function}" if c.moved and c.old.function != c.new.function else g.function
        status = f"[{styles[c.status]}]{c.status}[/]" + (f" {_delta(c)}" if c.status == "changed" else "")
        table.add_row(status, escape(where), escape(func), arches(c.old), arches(c.new), escape(g.expr))
    console.print(table)


def rejecting_table(rows, arch: str, console) -> None:
    """``gates --arch A --rejecting``: one block per (feature, file), rows by line."""
    if not rows:
        console.print(f"no gate keeps {arch} out")
        return
    for feature, file, members in groups(rows):
        console.print(f"[bold]{feature}[/bold]  {file}", highlight=False)
        for r in members:
            g = r.gate
            console.print(f"  {g.line:>5}  {g.role:<8} {g.function}: {_md(g.expr)[:100]}  "
                          f"(admits {', '.join(g.arches) or 'none'})", highlight=False, soft_wrap=True)
            console.print(f"         {r.command}", highlight=False, soft_wrap=True)
    console.print(f"{len(rows)} gate(s) keep {arch} out", highlight=False)


def jit_lists_table(label: str, lists, major: int | None, title: str, console) -> None:
    """FlashInfer's JIT arch lists (``gates.jitlists``), with the verdict for ``major``."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(f"{label}: {title}"), title_justify="left")
    cols = [("where", 3), ("function", 3), ("majors", 2)] + ([("verdict", 1)] if major is not None else [])
    for col, ratio in cols:
        table.add_column(col, overflow="fold", ratio=ratio)
    for j in lists:
        majors = "any (no filter)" if j.majors == () else (" ".join(map(str, j.majors)) if j.majors else "?")
        row = [escape(f"{j.file}:{j.line}"), escape(j.function or "(module)"), escape(majors if j.majors is not None
                                                                                      else f"? {j.code}")]
        if major is not None:
            row.append(j.verdict(major))
        table.add_row(*row)
    console.print(table)
    console.print(f"{len(lists)} list(s)")
