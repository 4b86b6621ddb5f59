"""course_tools/grading/active_content.py: each kind of active content a notebook can carry is made inert,
and what a teacher reads (text, tables, images, the lessons' own markdown) is kept."""

import base64
import copy
import logging
from html.parser import HTMLParser

import nbformat
import pytest
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output, new_raw_cell

from course_tools.grading import active_content
from course_tools.grading.active_content import (
    REMOVED_IMAGE,
    REMOVED_NOTE,
    NeutraliseActiveContent,
    inert_markdown,
    neutralise_cell,
    sanitise_html,
)
from course_tools.lessons import REPO_ROOT

LISTENER = "http://127.0.0.1:9"
PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg==")
# A DataFrame's _repr_html_, as pandas writes it.
PANDAS_TABLE = """<div>
<style scoped>
    .dataframe tbody tr th:only-of-type { vertical-align: middle; }
</style>
<table border="1" class="dataframe">
  <thead>
    <tr style="text-align: right;"><th></th><th>step</th><th>ms</th></tr>
  </thead>
  <tbody>
    <tr><th>0</th><td>bf16</td><td>1.25</td></tr>
  </tbody>
</table>
</div>"""
ACTIVE_TAGS = {"script", "style", "iframe", "frame", "frameset", "object", "embed", "applet", "form", "input",
               "button", "select", "textarea", "meta", "base", "link", "svg", "math", "template", "video",
               "audio", "source", "track"}
URL_ATTRIBUTES = {"src", "href", "action", "formaction", "data", "srcdoc", "poster", "background", "srcset",
                  "xlink:href", "ping", "lowsrc", "dynsrc", "cite", "longdesc", "manifest"}


class _Markup(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found = []

    def handle_starttag(self, tag, attrs):
        if tag in ACTIVE_TAGS:
            self.found.append(f"<{tag}>")
        for name, value in attrs:
            value = value or ""
            if name.startswith("on") or name == "style":
                self.found.append(f"{tag} {name}")
            elif name in URL_ATTRIBUTES and not allowed_url(tag, name, value):
                self.found.append(f"{tag} {name}={value[:40]}")

    handle_startendtag = handle_starttag


IMAGE_URLS = tuple(f"data:image/{kind};base64," for kind in ("png", "jpeg", "gif", "svg+xml"))


def allowed_url(tag: str, name: str, value: str) -> bool:
    if tag == "img" and name == "src":
        return value.startswith(IMAGE_URLS)
    return tag == "a" and name == "href" and value.startswith(("https://", "http://", "mailto:", "#"))


def active_parts(markup: str) -> list[str]:
    """Tags, handlers, styles and URLs in `markup` that could run or fetch anything."""
    parser = _Markup()
    parser.feed(markup)
    parser.close()
    return parser.found


def rendered(source: str, attachments=None) -> str:
    """What nbconvert's HTML exporters (HTMLExporter.markdown2html) make of a markdown cell."""
    renderer = IPythonRenderer(escape=False, attachments=attachments or {})
    return MarkdownWithMath(renderer=renderer).render(source)


def displayed(data: dict, metadata=None):
    cell = new_code_cell("show()")
    cell.outputs = [new_output("display_data", data=data, metadata=metadata or {})]
    neutralise_cell(cell)
    return cell.outputs[0]


# --- HTML ------------------------------------------------------------------------------------

@pytest.mark.parametrize("payload", [
    '<img src="x" onerror="alert(1)">',
    "<script>alert(1)</script>",
    "<svg onload=alert(1)><script>alert(2)</script></svg>",
    '<a href="javascript:alert(1)">j</a><a href=" JaVa&#09;ScRiPt:alert(1)">k</a>',
    '<a href="data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==">d</a><a href="vbscript:x">v</a>',
    f'<img src="{LISTENER}/remote"><img src="//127.0.0.1:9/scheme-relative"><img src="files/pic.png">',
    f'<div style="background:url({LISTENER}/css)">s</div><style>@import url("{LISTENER}/import");</style>',
    f'<link rel="stylesheet" href="{LISTENER}/link">',
    f'<iframe src="{LISTENER}/frame" srcdoc="&lt;script&gt;alert(1)&lt;/script&gt;"></iframe>',
    f'<object data="{LISTENER}/object"></object><embed src="{LISTENER}/embed">',
    f'<meta http-equiv="refresh" content="0;url={LISTENER}/meta">',
    f'<base href="{LISTENER}/base/">',
    f'<form action="{LISTENER}/form"><button formaction="{LISTENER}/b">go</button>'
    "<input autofocus onfocus=alert(1)></form>",
    '<details open ontoggle="alert(1)"><summary>more</summary></details>',
    f'<video src="x" onerror="alert(1)" poster="{LISTENER}/poster"></video><math><mtext>x</mtext></math>',
    f'<img src="data:image/png;base64,{PNG}" width="8 onload=alert(1)" srcset="{LISTENER}/set 2x">',
    '<a href="evil.html">a file of the submission, served on the teacher\'s origin</a>',
])
def test_html_keeps_nothing_that_runs_or_fetches(payload):
    assert active_parts(payload), "the payload should be active before cleaning"
    assert active_parts(sanitise_html(payload)) == []


def test_an_image_whose_source_was_removed_says_so():
    assert sanitise_html(f'<img src="{LISTENER}/x" alt="plot">') == f'<img src="{REMOVED_IMAGE}" alt="plot">'
    assert b"image removed by the grader" in base64.b64decode(REMOVED_IMAGE.split(",", 1)[1])


def test_html_keeps_text_tables_images_and_links():
    cleaned = sanitise_html(PANDAS_TABLE + f'<p>loss <b>1.5</b></p><img src="data:image/png;base64,{PNG}" '
                            'width="8"><a href="https://pytorch.org/docs">docs</a>')
    for kept in ("<table", "<th>step</th>", "<td>bf16</td>", "<td>1.25</td>", "<b>1.5</b>",
                 f'src="data:image/png;base64,{PNG}" width="8"', 'href="https://pytorch.org/docs"'):
        assert kept in cleaned
    assert "vertical-align" not in cleaned and "style" not in cleaned


# --- outputs ---------------------------------------------------------------------------------

def test_a_javascript_output_is_dropped_and_a_note_left():
    for mime in ("application/javascript", "text/javascript", "application/vnd.jupyter.widget-view+json",
                 "application/vnd.custom+json", "application/pdf"):
        assert displayed({mime: "alert(1)"}).data == {"text/plain": REMOVED_NOTE}
    kept = displayed({"application/javascript": "alert(1)", "text/plain": "<Javascript object>"})
    assert kept.data == {"text/plain": "<Javascript object>"}


def test_text_png_and_tables_stay():
    output = displayed({"text/plain": "loss 1.5", "image/png": PNG, "image/jpeg": PNG, "image/gif": PNG,
                        "text/html": PANDAS_TABLE}, {"image/png": {"width": 320, "height": 240}})
    assert output.data["text/plain"] == "loss 1.5"
    assert output.data["image/png"] == output.data["image/jpeg"] == output.data["image/gif"] == PNG
    assert "<td>bf16</td>" in output.data["text/html"]
    assert output.metadata == {"image/png": {"width": 320, "height": 240}}


def test_an_svg_is_shown_through_an_image():
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><script>alert(2)</script>'
           f'<image href="{LISTENER}"/></svg>')
    output = displayed({"image/svg+xml": svg, "text/plain": "<svg>"})
    assert "image/svg+xml" not in output.data
    html = output.data["text/html"]
    assert html.startswith('<img src="data:image/svg+xml;base64,') and active_parts(html) == []
    assert "image/svg+xml" not in displayed({"image/svg+xml": svg, "image/png": PNG}).data


def test_latex_and_markdown_outputs():
    assert displayed({"text/latex": "$x^2$"}).data == {"text/plain": "$x^2$"}
    markdown = displayed({"text/markdown": "<img src=x onerror=alert(1)> **done**"}).data["text/markdown"]
    assert active_parts(rendered(markdown)) == [] and "done" in rendered(markdown)


def test_output_metadata_keeps_only_image_sizes():
    """nbconvert pastes width and height unquoted into the page and takes `filenames` as the source."""
    output = displayed({"image/png": PNG, "text/html": "<b>x</b>"}, {
        "image/png": {"width": "8 onload=alert(1)", "height": 4, "unconfined": True},
        "filenames": {"image/png": f"{LISTENER}/png"}, "text/html": {"isolated": True},
        "width": "1 onload=x"})
    assert output.metadata == {"image/png": {"height": 4}}


def test_stream_and_error_outputs_are_left_to_nbconvert():
    cell = new_code_cell("print()")
    cell.outputs = [new_output("stream", name="stdout", text="<script>alert(1)</script>\n"),
                    new_output("error", ename="ValueError", evalue="<b>x</b>", traceback=["<i>tb</i>"])]
    before = copy.deepcopy(cell.outputs)
    neutralise_cell(cell)
    assert cell.outputs == before


# --- markdown --------------------------------------------------------------------------------

@pytest.mark.parametrize("source", [
    "My notes <img src=x onerror=alert(1)> and <script>alert(1)</script>",
    f"![plot]({LISTENER}/markdown-image)",
    "[click me](javascript:alert(1)) [again](jAvAsCrIpT&#58;alert(1))",
    f"[ref][r]\n\n[r]: {LISTENER.replace('http', 'javascript')}",
    f"<textarea>\nhidden\n\n![x]({LISTENER}/after-a-blank-line)\n</textarea>",
    f"<pre>\ncode\n\n![x]({LISTENER}/inside-pre)\n</pre>\n\n    <img src=x onerror=alert(1)>",
    f'<div>\n<iframe src="{LISTENER}"></iframe>\n\n'
    f'<meta http-equiv="refresh" content="0;url={LISTENER}">\n</div>',
    f'<base href="{LISTENER}/"><form><input autofocus onfocus="alert(1)"></form>',
    "```mermaid\ngraph TD; A-->B\n```",
])
def test_a_markdown_cell_renders_to_nothing_active(source):
    cell = new_markdown_cell(source)
    neutralise_cell(cell)
    html = rendered(cell.source)
    assert active_parts(html) == [] and "javascript:" not in html.lower()


def test_markdown_that_renders_safely_is_left_as_it_is():
    source = ("# Mixed precision\nThe *scaler* multiplies $\\mathcal{L}$ by $s < 2^{16}$, see "
              "[the docs](https://docs.pytorch.org/docs/stable/amp.html) and "
              "![plot](attachment:plot.png).\n\n"
              "| dtype | bits |\n|---|---|\n| bf16 | 16 |\n\n```python\nif x < 3 and y > 2:\n    pass\n```\n"
              "- [ ] a task\n\n> a quote & more")
    assert inert_markdown(source, {"plot.png": {"image/png": PNG}}) == source


def test_the_lessons_own_markdown_is_left_as_it_is():
    for path in sorted((REPO_ROOT / "source").glob("*/*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "markdown":
                assert inert_markdown(cell.source, cell.get("attachments")) == cell.source, path


def test_rewritten_markdown_keeps_the_students_text_and_math():
    source = "My **answer** is $x_1 < y$ <span onclick=alert(1)>here</span>\n\n| a |\n|---|\n| 1 |"
    html = rendered(inert_markdown(source))
    for kept in ("<strong>answer</strong>", "$x_1 &lt; y$", "<span>here</span>", "<td>1</td>"):
        assert kept in html


def test_markdown_the_renderer_cannot_take_is_shown_as_text(monkeypatch):
    def fails(source):
        raise RecursionError("too deep")

    monkeypatch.setattr(active_content, "_tokens", fails)
    active_content._kept_inert_markdown.cache_clear()
    source = "<b>deep</b> & *deeper*"
    assert rendered(inert_markdown(source)).strip() == "<pre>&lt;b&gt;deep&lt;/b&gt; &amp; *deeper*</pre>"
    active_content._kept_inert_markdown.cache_clear()


def test_a_markdown_cell_is_judged_once_and_the_same_every_time(monkeypatch):
    """The lesson's prose, repeated in every student's notebook, is judged once per process; a cell
    with attachments, or a long one, every time, and every answer is the one judging gives."""
    judged = []
    judge = active_content._inert_markdown
    monkeypatch.setattr(active_content, "_inert_markdown",
                        lambda source, attachments: judged.append(source) or judge(source, attachments))
    active_content._kept_inert_markdown.cache_clear()
    prose, script = "The *scaler* multiplies the loss.", "Read <img src=x onerror=alert(1)> this"
    for _ in range(3):
        assert inert_markdown(prose) == prose
        assert "onerror" not in inert_markdown(script) and "this" in inert_markdown(script)
    assert judged == [prose, script]
    pictured = "![a](attachment:a.png)"
    long = "word " * (active_content.KEPT_MARKDOWN_CHARACTERS // 5 + 1)
    for _ in range(2):
        assert inert_markdown(pictured, {"a.png": {"image/png": PNG}}) == pictured
        assert inert_markdown(long) == long
    assert judged == [prose, script, pictured, long, pictured, long]
    active_content._kept_inert_markdown.cache_clear()


def test_attachments_keep_only_pixels_and_the_page_still_renders():
    cell = new_markdown_cell("![a](attachment:a.png) ![b](attachment:b.svg) ![c](attachment:c.html)")
    cell.attachments = {"a.png": {"image/png": PNG}, "b.svg": {"image/svg+xml": "<svg onload=alert(1)/>"},
                        "c.html": {"text/html": "<script>alert(1)</script>"}}
    neutralise_cell(cell)
    assert cell.attachments == {"a.png": {"image/png": PNG}}
    html = rendered(cell.source, cell.attachments)  # nbconvert raises on a missing attachment
    assert f"data:image/png;base64,{PNG}" in html and active_parts(html) == []


# --- raw cells, widgets, the whole notebook --------------------------------------------------

def test_a_raw_html_cell_keeps_its_text_only():
    cell = new_raw_cell(f'<img src=x onerror=alert(1)><b>bold</b> <a href="{LISTENER}">link</a> & more',
                        metadata={"raw_mimetype": "text/html", "format": "text/html"})
    neutralise_cell(cell)
    assert cell.source == "bold link &amp; more"


def hostile_notebook():
    code = new_code_cell("show()")
    code.outputs = [new_output("display_data", data={"text/html": '<img src=x onerror="alert(1)">',
                                                     "application/javascript": "alert(1)"}),
                    new_output("execute_result", data={"text/plain": "42"}, execution_count=3)]
    notebook = new_notebook(cells=[new_markdown_cell("<script>alert(1)</script> notes"), code,
                                   new_raw_cell("<script>alert(1)</script>raw")])
    notebook.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    code.execution_count = "<img src=x onerror=alert(1)>"  # nbconvert pastes it into the page
    return notebook


def test_the_whole_notebook_and_its_widget_state(caplog):
    caplog.set_level(logging.INFO)
    notebook, _ = NeutraliseActiveContent().preprocess(hostile_notebook(), {})
    assert "widgets" not in notebook.metadata
    markdown, code, raw = notebook.cells
    assert active_parts(rendered(markdown.source)) == [] and "notes" in markdown.source
    assert code.execution_count is None and code.outputs[1].execution_count == 3
    assert code.outputs[0].data == {"text/html": f'<img src="{REMOVED_IMAGE}">'}
    assert raw.source == "raw"
    nbformat.validate(notebook)
    assert "application/javascript output" in caplog.text and "saved widget state" in caplog.text


def test_making_a_notebook_inert_twice_changes_nothing_more():
    once, _ = NeutraliseActiveContent().preprocess(hostile_notebook(), {})
    twice, _ = NeutraliseActiveContent().preprocess(copy.deepcopy(once), {})
    assert twice == once
