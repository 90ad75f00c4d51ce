"""The HTML of a report: sections of tables, plotly figures and PNG pictures, in one file that
needs no network: plotly.js is embedded once (with the first figure), pictures are base64 data
URIs, the style is inline. Every text from the files shown is escaped, and paths inside the
project are shown relative to it.

A small inline script counts the plots that rendered and the page's script errors into
`<html data-check="plots:R/N errors:E">`, which the headless-browser test reads."""

import base64
import html
import re

from litlab.utils.code_state import CODE_ROOT, snapshot_origin

# the project folder (where logs/ and data/ live; a sweep's code snapshot names its origin)
PROJECT = str((snapshot_origin() or CODE_ROOT).resolve())
_IN_PROJECT = re.compile(re.escape(PROJECT) + r"(/|(?![\w\-]|\.[\w\-]))")

STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}
h1{font-size:1.5em} h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
td,th{border:1px solid #ddd;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f4f4f4} tr.best td{background:#fff6d5} tr.bad td{color:#a00}
pre{background:#f7f7f7;padding:1em;overflow:auto;font-size:.8em;max-height:40em}
.missing{color:#8a5a00;background:#fff8e6;border-left:4px solid #e0a000;padding:.5em 1em}
.pictures{display:flex;flex-wrap:wrap;gap:1em} figure{margin:0}
figure img{max-width:560px;border:1px solid #eee} figcaption{font-size:.85em;color:#555}
details summary{cursor:pointer;margin:.5em 0}
"""

CHECK = """
window.litlabErrors = [];
window.addEventListener("error", function (e) { window.litlabErrors.push(String(e.message)); });
(function () {
  var original = console.error;
  console.error = function () {
    window.litlabErrors.push(Array.prototype.join.call(arguments, " "));
    return original.apply(console, arguments);
  };
})();
window.addEventListener("load", function () {
  setTimeout(function () {
    var wanted = document.querySelectorAll("[data-plot]"), drawn = 0;
    wanted.forEach(function (el) {
      if (el.tagName === "IMG" ? el.complete && el.naturalWidth > 0
          : el.querySelector(".js-plotly-plot .main-svg")) { drawn += 1; }
    });
    document.documentElement.setAttribute("data-check",
      "plots:" + drawn + "/" + wanted.length + " errors:" + window.litlabErrors.length);
  }, 300);
});
"""


def relative(text: str) -> str:
    """`text` with paths inside the project relative to it (`<project>/logs/x` -> `logs/x`,
    the project itself `.`): a page is shared, and the folder it was made in is nobody's
    business and does not exist elsewhere."""
    return _IN_PROJECT.sub(lambda m: "" if m.group(1) else ".", text)


def esc(value) -> str:
    return html.escape(relative("" if value is None else str(value)))


def cell(value) -> str:
    """A table cell: numbers (also those read from CSV text) to 4 significant digits."""
    if isinstance(value, str) and "." in value:
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, float):
        return f"{value:.4g}"
    return esc(value)


class Page:
    """A report page: `add` sections, then `html()`."""

    def __init__(self, title: str, subtitle: str):
        self.title, self.subtitle = title, subtitle
        self.sections: list[str] = []
        self._plotly_embedded = False

    def add(self, heading: str, *parts: str) -> None:
        self.sections.append(
            f"<section><h2>{esc(heading)}</h2>\n" + "\n".join(parts) + "</section>"
        )

    def figure(self, fig) -> str:
        """A plotly figure (plotly.js goes inline with the first one)."""
        body = fig.to_html(
            full_html=False,
            include_plotlyjs=not self._plotly_embedded,
            config={"displaylogo": False, "responsive": True},
        )
        self._plotly_embedded = True
        return f'<div class="plot" data-plot="plotly">{relative(body)}</div>'

    @staticmethod
    def picture(data: bytes, caption: str) -> str:
        uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
        return (
            f'<figure><img data-plot="png" src="{uri}" alt="{esc(caption)}">'
            f"<figcaption>{esc(caption)}</figcaption></figure>"
        )

    @staticmethod
    def table(rows: list[dict], columns: list[str], classes: list[str] | None = None) -> str:
        head = "".join(f"<th>{esc(c)}</th>" for c in columns)
        body = []
        for i, row in enumerate(rows):
            kind = f' class="{classes[i]}"' if classes and classes[i] else ""
            body.append(f"<tr{kind}>" + "".join(f"<td>{cell(row.get(c))}</td>" for c in columns))
        return (
            f"<table><tr>{head}</tr>" + "</tr>".join(body) + ("</tr>" if body else "") + "</table>"
        )

    @staticmethod
    def missing(text: str) -> str:
        return f'<p class="missing">{esc(text)}</p>'

    @staticmethod
    def text(text: str) -> str:
        return f"<p>{esc(text)}</p>"

    @staticmethod
    def details(summary: str, *parts: str) -> str:
        """Parts folded under a one-line summary (opened by a click)."""
        return f"<details><summary>{esc(summary)}</summary>\n" + "\n".join(parts) + "</details>"

    @staticmethod
    def pre(text: str) -> str:
        return f"<pre>{esc(text)}</pre>"

    def html(self) -> str:
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{esc(self.title)}</title><style>{STYLE}</style><script>{CHECK}</script>"
            f"</head><body><h1>{esc(self.title)}</h1><p>{esc(self.subtitle)}</p>\n"
            + "\n".join(self.sections)
            + "\n</body></html>\n"
        )
