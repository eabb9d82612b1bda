"""Terminal output of ``tracecheck fix``: what was found, what was generated, and whether it is verified."""
from __future__ import annotations

from rich.console import Console

from ..fix.pipeline import NO_CODE_FIX, NOT_VERIFIED, NOTHING_TO_FIX, VERIFIED, FixOutcome
from . import brief


def render(o: FixOutcome, out: Console, verbose: bool = False) -> None:
    p = lambda text="": out.print(text, highlight=False, markup=False, soft_wrap=True)  # noqa: E731
    p(f"{o.probe_id}: {', '.join(o.kinds) or 'passes every diagnosis stage'}")
    for kind, explain in o.no_code_fix.items():
        p(f"  {kind}: no code fix is generated for this kind; what to do: {explain}")
    for kind in o.cured:
        p(f"  {kind}: cured by the fix below (no stage of the patched probe finds it)")
    for f in o.functions:
        p(f"  {f.function} ({f.module}): {f.action}")
        if f.mutates_args:
            # as lists, as this line has always shown them
            p(f"    mutates_args observed: forward {list(f.mutates_args.forward)}, backward "
              f"{list(f.mutates_args.backward)}")
        for todo in f.todo:
            p(f"    TODO: {todo}")
        for c in f.check:
            p(f"    CHECK: {c}")
        if verbose:
            for r in f.refused:
                p(f"    perturbation refused by the op: {r}")
    for site in o.sites:
        where = f"{site.file}:{site.line}" if site.file else f"line {site.line}"
        p(f"  {where} ({site.gb_type or site.kind}): {site.code.strip()[:100]}")
        for t in site.tried:
            if t.result != "kept":
                p(f"    tried {t.rewrite}: {t.result}")
        if site.rewrite:
            p(f"    rewrite {site.rewrite}: {site.note}")
            p(f"      (follows {site.doc})")
        elif not site.tried:
            p(f"    no rewrite applies{': ' + site.note if site.note else ''}")
    if o.diff:
        p()
        p(o.diff.rstrip("\n"))
        p()
    for name, text in o.upstream.items():
        p(text.rstrip("\n"))
        p()
    for path in o.written:
        p(f"  wrote {path}")
    for note in o.notes:
        p(f"  {note}")
    if o.verification is not None:
        brief.render(o.verification, out, verbose=verbose, advise=False)
    g = o.gradient_check
    if g is not None and g.ran:
        p(f"gradient check (the original has no backward to compare with): <grad, v> = {g.analytic:.6g}, finite "
          f"difference = {g.numeric:.6g} along a random direction v: {'agree' if g.ok else 'DISAGREE'}")
    if o.eager_mismatches:
        p("eager outputs/gradients of the patched probe vs the original:")
        for m in o.eager_mismatches[:10]:  # one record per phase (numerics.judge)
            w = m.worst
            detail = w.detail or f"max abs diff {w.max_abs_diff} (tol {w.tol})"
            p(f"  {m.phase}: {m.disagreeing} of {m.compared} differ; worst {w.what or ''}: {detail}")
    for op in o.shapes:
        p(f"shapes beyond the probe's, {op.op} (opcheck test_faketensor, test_aot_dispatch_dynamic):")
        if op.checked:
            p(f"  passed at: {'; '.join(op.checked)}")
        if op.restricted:
            p(f"  refused by the fake's rank check (the eager op accepts them): {'; '.join(op.restricted)}")
        if op.own_refused:
            p("  forward only (inputs detached), where the op's own backward fails in eager too (the probe's code, "
              "not the fix): " + "; ".join(f"{label} ({why})" for label, why in op.own_refused))
        if op.refused and verbose:
            more = f"; … {len(op.refused) - 12} more" if len(op.refused) > 12 else ""
            p(f"  the eager op refuses: {'; '.join(op.refused[:12])}{more}")
        elif op.refused:
            p(f"  the eager op refuses {len(op.refused)} more (-v lists them)")
    for r in o.reasons:
        p(f"not verified: {r}" if o.status not in (NO_CODE_FIX, NOTHING_TO_FIX) else f"  {r}")
    line = {VERIFIED: "fix VERIFIED: every stage " + ("of the compile target " if o.sites else "") +
                      "passes on the patched probe, and its eager outputs and gradients match " +
                      ("finite differences" if g is not None and g.ran else "the original's"),
            NOTHING_TO_FIX: "nothing to fix: the probe passes the diagnosis stages",
            NO_CODE_FIX: "no code fix generated"}.get(o.status, "fix NOT verified (see above)")
    checks = sum(len(f.check) for f in o.functions)
    if o.status == VERIFIED and o.sites:
        line += " (at the probe's inputs)"
    beyond = sum(len(op.checked) for op in o.shapes)
    if o.status == VERIFIED and beyond:
        line += f"; the fakes also at {beyond} other shape{'s' if beyond > 1 else ''} (listed above)"
        own = sum(len(op.own_refused) for op in o.shapes)
        if own:
            line += f", {own} more forward only (the op's own backward refuses them in eager)"
        restricted = sum(len(op.restricted) for op in o.shapes)
        if restricted:
            line += f", and {restricted} the eager op takes are refused by their rank checks"
    if o.status == VERIFIED and o.verification is not None:
        line += f"; on device {o.verification.env.device_text}"
    if o.status == VERIFIED and checks:
        line += f" ({'' if beyond else 'at the probe' + chr(39) + 's inputs; '}review the {checks} CHECK line{'s' if checks > 1 else ''} above, in the code)"
    p(line)
    if o.apply and o.status in (VERIFIED, NOT_VERIFIED):
        p("how to apply it in your own code (the patched copy shows it applied):")
        for a in o.apply:
            p(f"  {a}")
