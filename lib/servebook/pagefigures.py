"""Every figure a chapter draws gets its own alternative text and a caption, and no interval is drawn below zero.

The book's setup cell (``servebook.chapters._SETUP``) calls ``install()`` in each chapter's kernel: the PNG a figure is shown
as then carries ``alt`` and ``caption`` metadata, which the page template writes as the image's ``alt`` and a
``<figcaption>``. A figure says more for itself with two attributes its code sets:

    fig.sb_caption = "decode tok/s per forced backend, single stream; bars: 95% interval over 2 server starts"
    fig.sb_alt = "..."       # else made from its title, axis labels, bars and lines

Made from the figure otherwise: what (its title), units (its axis labels), and how many bars or lines it draws.
"""

from __future__ import annotations

__all__ = ["describe", "clip_at_zero", "install"]


def _categories(ax) -> list[str]:
    """The category labels of a chart whose x or y axis is categorical (bars per backend, per engine ...)."""
    for axis in (ax.yaxis, ax.xaxis):
        if type(getattr(axis, "units", None)).__name__ == "UnitData":
            return [t.get_text() for t in axis.get_ticklabels() if t.get_text()]
    return []


def _series(ax) -> list[str]:
    handles, labels = ax.get_legend_handles_labels()
    return [lab for lab in labels if lab and not lab.startswith("_")]


def describe(fig) -> tuple[str, str]:
    """(alt text, caption) of a matplotlib figure, from what it sets (``sb_alt``, ``sb_caption``) or what it draws."""
    parts, caps = [], []
    for ax in fig.get_axes():
        title, xl, yl = ax.get_title(), ax.get_xlabel(), ax.get_ylabel()
        if not (title or xl or yl or ax.patches or ax.lines):
            continue
        what = title or "a chart"
        bars = [p for p in ax.patches if p.get_width() or p.get_height()]
        kind = f"{len(bars)} bars" if bars else f"{len(ax.lines)} lines" if ax.lines else "a chart"
        cats = _categories(ax)
        series = _series(ax)
        alt = f"{what}: {kind}" + (f", {yl} against {xl}" if xl and yl else f" of {xl or yl}" if xl or yl else "")
        if cats:
            alt += "; one per " + ", ".join(cats[:8]) + (f" and {len(cats) - 8} more" if len(cats) > 8 else "")
        if series:
            alt += "; series: " + ", ".join(series[:8])
        parts.append(alt)
        points = sorted({len(line.get_xdata()) for line in ax.lines if not str(line.get_label()).startswith("_")})
        count = (f"{len(bars)} bars" if bars else f"{len(ax.lines)} lines" + (f" of {points[0]} points each" if len(points) == 1
                                                                              else "") if ax.lines else "")
        caps.append(f"{what}" + (f" - x: {xl}" if xl else "") + (f"; y: {yl}" if yl else "") + (f"; {count}" if count else ""))
    alt = getattr(fig, "sb_alt", None) or (". ".join(parts) + "." if parts else "a figure with no axes")
    caption = getattr(fig, "sb_caption", None) or ("; ".join(caps) if caps else "")
    return alt, caption


def clip_at_zero(fig) -> None:
    """An axis whose bars and points are all at or above zero starts at zero: an interval bar that would reach below it
    is cut there (a rate or a time cannot be negative). Log axes are left alone."""
    for ax in fig.get_axes():
        caps = {id(line) for c in ax.containers if type(c).__name__ == "ErrorbarContainer" for line in c.lines[1] or ()}
        for axis in ("x", "y"):
            if (ax.get_xscale() if axis == "x" else ax.get_yscale()) != "linear":
                continue
            values = []
            for p in ax.patches:
                if hasattr(p, "get_x") and hasattr(p, "get_width"):
                    lo = p.get_x() if axis == "x" else p.get_y()
                    values += [lo, lo + (p.get_width() if axis == "x" else p.get_height())]
            for line in ax.lines:
                if id(line) not in caps:
                    values += [float(v) for v in (line.get_xdata() if axis == "x" else line.get_ydata())
                               if isinstance(v, (int, float)) and v == v]
            lo, hi = ax.get_xlim() if axis == "x" else ax.get_ylim()
            if values and min(values) >= 0 and min(lo, hi) < 0:
                (ax.set_xlim if axis == "x" else ax.set_ylim)(0, hi) if lo < hi else None


def install() -> None:
    """In a chapter's kernel: every matplotlib figure shown as PNG carries ``alt`` and ``caption`` metadata and has its
    intervals cut at zero (``clip_at_zero``)."""
    import matplotlib.pyplot as plt
    from IPython import get_ipython
    from matplotlib.figure import Figure

    ip = get_ipython()
    if ip is None:
        return
    plt.close(plt.figure())  # loads the inline backend, which registers its PNG formatter first (pyplot loads it lazily)
    fmt = ip.display_formatter.formatters["image/png"]
    try:
        draw = fmt.lookup_by_type(Figure)
    except KeyError:
        return

    def png(fig, *args, **kwargs):
        clip_at_zero(fig)
        alt, caption = describe(fig)
        data = draw(fig, *args, **kwargs)
        return (data, {"alt": alt, "caption": caption}) if data else data

    fmt.for_type(Figure, png)
